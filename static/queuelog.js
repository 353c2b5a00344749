/* queuelog admin: refresh the live part of a page in place, keeping the operator's filters.
 *
 * The element marked [data-live] is re-fetched from the page's own URL (so every filter and the page
 * cursor stay as they are) with ?partial=1, and swapped in only when the server says it sent a fragment.
 * Nothing here is needed: with JavaScript off, the pages are complete and the "Reload" link does the same.
 * No inline script anywhere (the Content-Security-Policy forbids it); this file is the only script.
 */
(function () {
  "use strict";

  // Buttons whose effect is hard to undo ask first. A form marked data-confirm-step is also asked about by
  // the server (a page naming what will change) when it comes without confirmed=yes: the yes given here
  // is sent along, so the question is asked once, and with JavaScript off the server's page asks it.
  document.addEventListener("submit", function (event) {
    var asker = event.submitter && event.submitter.hasAttribute("data-confirm") ? event.submitter : event.target;
    var question = asker.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
      return;
    }
    var form = event.target;
    if (question && form.hasAttribute("data-confirm-step") && !form.querySelector("input[name=confirmed]")) {
      var yes = document.createElement("input");
      yes.type = "hidden";
      yes.name = "confirmed";
      yes.value = "yes";
      form.appendChild(yes);
    }
  });

  var live = document.querySelector("[data-live]");
  if (!live || !window.fetch) {
    return;
  }
  var seconds = Math.max(1, parseInt(live.getAttribute("data-refresh-seconds"), 10) || 10);
  var status = document.querySelector("[data-refresh-status]");
  var toggle = document.querySelector("[data-refresh-toggle]");
  var paused = false;
  var stopped = false;
  var timer = null;

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function clock(date) {
    return date.toISOString().substring(11, 19) + " UTC";
  }

  // The operator is busy with the live part (a ticked box, a focused control): do not pull it away.
  function busy() {
    if (live.querySelector("input[type=checkbox]:checked")) {
      return true;
    }
    var active = document.activeElement;
    return Boolean(active && active !== document.body && live.contains(active) &&
                   /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName));
  }

  function partialUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    return url.toString();
  }

  function refresh() {
    if (paused || stopped || document.hidden || busy()) {
      schedule();
      return;
    }
    fetch(partialUrl(), {credentials: "same-origin", cache: "no-store", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (response.status === 401) {
          stopped = true;
          say("Signed out: reload the page to sign in again.");
          return null;
        }
        if (!response.ok || response.headers.get("X-Queuelog-Partial") !== "1") {
          say("Could not refresh (HTTP " + response.status + "); trying again.");
          return null;
        }
        return response.text();
      })
      .then(function (html) {
        if (html !== null && html !== undefined && !busy()) {
          live.innerHTML = html;
          say("Updated " + clock(new Date()) + " · every " + seconds + " s");
        }
      })
      .catch(function () {
        say("Server unreachable; trying again.");
      })
      .then(schedule);
  }

  function schedule() {
    window.clearTimeout(timer);
    if (!stopped) {
      timer = window.setTimeout(refresh, seconds * 1000);
    }
  }

  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
      toggle.setAttribute("aria-pressed", paused ? "true" : "false");
      say(paused ? "Auto-refresh paused" : "Auto-refresh every " + seconds + " s");
      schedule();
    });
  }
  say("Auto-refresh every " + seconds + " s · as of " + clock(new Date()));
  schedule();
}());

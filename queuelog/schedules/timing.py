"""When a schedule ticks: a cron expression in a timezone, or a fixed interval.

Cron expressions are read and stepped by cronsim (a well-kept library that follows Debian cron, DST
included); we only add the usual @-aliases, which it does not read. Five fields, or six with the seconds
first. Times come in and go out as aware UTC datetimes; the timezone only decides which wall-clock times
match. Across DST changes cronsim does what Debian cron does, per tick of a fixed time of day: a time in the
hour that spring-forward skips runs once, just after the gap; a time in the hour that fall-back repeats runs
once, at its first occurrence. Expressions with a wildcard (or a step) in the minute or hour field run on
every real minute or hour of the schedule's timezone. Six fields with a seconds field other than 0 step in
real time (cronsim leaves them out of Debian's DST handling): a fixed time of day in the skipped hour does
not run that day, one in the repeated hour runs twice.

An interval of N seconds ticks at the multiples of N seconds since the Unix epoch (every 600 s: at :00,
:10, :20 … of each hour, UTC), so every server process computes the same ticks without any shared state.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

#: The aliases schedules take besides five or six fields, and the five fields each stands for.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_EVERY_SECONDS = 86_400
#: Names the tz database carries that are no zone of their own: whatever the host is set to (localtime), the
#: template of POSIX TZ strings (posixrules), "no zone set yet" (Factory); and the trees of copies of every
#: zone, posix/ (the same rules) and right/ (leap seconds counted, which no datetime here does).
HOST_NAMES = frozenset({"localtime", "posixrules", "Factory"})
HOST_TREES = ("posix/", "right/")
#: What a cron expression may look like before cronsim reads its values: 5 or 6 fields of digits, names (JAN,
#: MON), * ? / , - # L W, apart by spaces or tabs; or an alias in any case. The OpenAPI document quotes it, and
#: it is written so that Python's re and ECMA-262 read it alike (the values themselves only cronsim can check).
_FIELD = "[0-9A-Za-z*?/,#-]+"
_ALIAS = "|".join("@" + "".join(f"[{c.lower()}{c.upper()}]" for c in alias[1:]) for alias in ALIASES)
CRON_PATTERN = f"^[ \\t]*({_ALIAS}|{_FIELD}([ \\t]+{_FIELD}){{4,5}})[ \\t]*$"
CRON = re.compile(CRON_PATTERN)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TimingError(ValueError):
    """A cron expression, interval or timezone that cannot be used; the message says why."""


@dataclass(frozen=True)
class Timing:
    """A schedule's ticks: ``cron`` in ``timezone``, or every ``every_seconds`` seconds (exactly one)."""

    cron: str | None
    every_seconds: int | None
    timezone: str

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (aware), as an aware UTC datetime on a whole second."""
        if self.every_seconds is not None:
            elapsed = int((moment - _EPOCH) // timedelta(seconds=1))
            return _EPOCH + timedelta(seconds=(elapsed // self.every_seconds + 1) * self.every_seconds)
        local = moment.astimezone(zone(self.timezone))
        try:
            return next(CronSim(expand(self.cron), local)).astimezone(UTC)
        except StopIteration:
            raise TimingError("the cron expression matches no time in the next 50 years") from None

    def latest_at_or_before(self, moment: datetime, since: datetime) -> datetime:
        """The last tick at or before ``moment``, given that ``since`` is a tick at or before it."""
        if self.every_seconds is not None:
            elapsed = int((moment - _EPOCH) // timedelta(seconds=1))
            return max(since, _EPOCH + timedelta(seconds=elapsed // self.every_seconds * self.every_seconds))
        # Stepping forward from ``since`` walks each missed tick; after a long downtime of a frequent
        # schedule, cronsim's reverse iteration finds the last one at once.
        tick = since
        for _ in range(1000):
            following = self.next_after(tick)
            if following > moment:
                return tick
            tick = following
        start = (moment.replace(microsecond=0) + timedelta(seconds=1)).astimezone(zone(self.timezone))
        latest = next(CronSim(expand(self.cron), start, reverse=True)).astimezone(UTC)
        return max(tick, latest)

    def describe(self) -> str:
        """How the pages and the CLI show it: the cron expression, or "every N s"."""
        return self.cron if self.cron is not None else f"every {self.every_seconds} s"


@functools.cache
def zone_names() -> frozenset[str]:
    """The timezone names a new schedule may take: the IANA zones less HOST_NAMES and HOST_TREES.

    Read from the tzdata package's list (a dependency, so it is the same IANA release wherever the server
    runs), not from ``zoneinfo.available_timezones()`` alone: that also walks the host's zoneinfo folders,
    whose extras differ from one system to the next (localtime, posix/, right/). Which rules a name loads
    still follows zoneinfo: the host's database when it has the zone, else the tzdata package's.
    """
    try:
        names = set(resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split())
    except (ModuleNotFoundError, OSError):
        names = available_timezones()  # the package missing from an odd install: what the host has
    return frozenset(name for name in names if name not in HOST_NAMES and not name.startswith(HOST_TREES))


def check_zone(name: str) -> str:
    """``name`` if a new schedule may take it (a canonical IANA zone name), else TimingError saying why."""
    if name in zone_names():
        zone(name)
        return name
    if name in HOST_NAMES or name.startswith(HOST_TREES):
        plain = name.split("/", 1)[1] if name.startswith(HOST_TREES) else None
        instead = f"use {plain!r}" if plain in zone_names() else "use an IANA name such as Europe/Berlin or UTC"
        raise TimingError(f"{name!r} means different things on different hosts; {instead}")
    raise TimingError(f"unknown timezone {name!r}; use an IANA name such as Europe/Berlin or UTC")


def zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name`` (the tzdata package provides them where the system has none).

    Loads any name zoneinfo finds, so a schedule stored before check_zone was strict still ticks."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        raise TimingError(f"unknown timezone {name!r}; use an IANA name such as Europe/Berlin or UTC") from None


def expand(expression: str) -> str:
    """The five or six fields an expression stands for (an @-alias becomes its five fields).

    Six fields whose seconds are just 0 become the five they mean: cronsim gives five fields Debian cron's DST
    handling (a 02:30 job runs once on both change days), and six fields none, so ``0 30 2 * * *`` would
    otherwise skip the spring-forward day and run twice on the fall-back day.
    """
    expression = ALIASES.get(expression.strip().lower(), expression)
    fields = expression.split()
    return " ".join(fields[1:]) if len(fields) == 6 and fields[0] == "0" else expression


def check_cron(expression: str, timezone: str) -> str:
    """``expression`` tidied (single spaces; an alias in lower case), or TimingError saying what is wrong."""
    if not CRON.fullmatch(expression):
        raise TimingError(
            "must be 5 fields (minute hour day month weekday), or 6 with the seconds first, of digits, "
            "names and * ? / , - # L W apart by spaces; or one of " + ", ".join(ALIASES)
        )
    tidy = " ".join(expression.split())
    if tidy.lower() in ALIASES:
        return tidy.lower()
    if tidy.startswith("@"):
        raise TimingError(f"unknown alias {tidy!r}; use one of {', '.join(ALIASES)}")
    fields = tidy.split(" ")
    if len(fields) not in (5, 6):
        raise TimingError(f"has {len(fields)} fields; use 5 (minute hour day month weekday) or 6 (seconds first)")
    try:
        next(CronSim(expand(tidy), datetime.now(UTC).astimezone(zone(timezone))))
    except StopIteration:
        raise TimingError("matches no time in the next 50 years") from None
    except CronSimError as error:
        raise TimingError(f"is not a valid cron expression: {str(error).lower()}") from None
    except Exception:  # noqa: BLE001 - whatever the parser trips on in odd input is a bad expression, not a 500
        raise TimingError("is not a valid cron expression") from None
    return tidy

"""Who may do what: API keys and their producer quotas, admin users, their server-side sessions, the
sign-in throttle and the cookie session of the admin pages."""

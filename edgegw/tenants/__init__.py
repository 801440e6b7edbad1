"""Tenants' limits, budgets and costs (edgegw.keyfile defines tenants and keys;
edgegw.auth.client_keys says who a request comes from):

- `limits`: token buckets, pure (refill, wait, OpenAI's reset format);
- `pricing`: a request's cost from its usage and its model's prices;
- `budgets`: usage by calendar period, kept in SQLite (WAL) off the request path;
- `redis_link`: a small RESP client over a Trio socket (why not a library: its doc);
- `shared`: the limits and budgets through Redis, one Lua script to admit, one to settle;
- `admission`: `Tenancy.admit` (scope, budgets, requests/tokens per minute, requests at
  once, in process) and the `Ticket` a request's recording settles with its usage.
"""

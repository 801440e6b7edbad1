"""Tenants' limits, budgets and costs (edgegw.keyfile defines tenants and keys;
edgegw.auth.client_keys says who a request comes from):

- `limits`: token buckets, pure (refill, wait, OpenAI's reset format);
- `pricing`: a request's cost from its usage and its model's prices;
- `budgets`: usage by calendar period, kept in SQLite (WAL) off the request path;
- `admission`: `Tenancy.admit` (scope, budgets, requests/tokens per minute, requests at
  once, in process) and the `Ticket` a request's recording settles with its usage.
"""

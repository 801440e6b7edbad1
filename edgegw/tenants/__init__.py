"""Tenants' limits (edgegw.keyfile defines tenants and keys; edgegw.auth.client_keys says
who a request comes from):

- `limits`: token buckets, pure (refill, wait, OpenAI's reset format);
- `admission`: `Tenancy.admit` (scope, requests/tokens per minute, requests at once, in
  process) and the `Ticket` a request's recording settles with its usage.
"""

"""Client authentication by OIDC bearer tokens (AUTH_ENABLED, AUTH_OIDC_*).

- `discovery`: what is read from the identity provider (the discovery document, the JWKS),
  with edgegw's own async client, and the pure checks of both documents;
- `keys`: the signing keys as data (`SigningKey`, `read_key_set`) and their cache
  (`SigningKeys`): lifetime from Cache-Control, one shared refetch per cooldown for an unknown
  `kid`, stale keys kept while the IdP is down;
- `verifier`: `OidcVerifier`, owned by `serve()` (`run`) and reached by the app through the
  `Gateway` (`verify`): the token checks, the cache of verified tokens and the 401 answers.

Client API keys (EDGEGW_API_KEYS) stay in edgegw.app; with both configured a request passes
with either (see README, "Authentication").
"""

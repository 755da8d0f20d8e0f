"""An MCP server that is also its own OAuth 2.1 authorization server, on the official
Python SDK's auth support (mcp 2.x: `mcp.server.auth`): protected resource metadata
(RFC 9728) at /.well-known/oauth-protected-resource/mcp, authorization server metadata
(RFC 8414), dynamic client registration (RFC 7591), the authorization code grant with
PKCE (RFC 7636) and refresh tokens, bearer checks on /mcp with the `resource` the token
was issued for (RFC 8707). The provider keeps everything in memory.

Test-only behaviour:
- /authorize approves at once: it redirects to the client's redirect_uri with `code`,
  `state` and `iss` (RFC 9207), as the conformance suite's mock authorization server does;
- POST /token also takes `grant_type=client_credentials` (RFC 6749 §4.4; the SDK has no
  such grant) for the pre-registered confidential client given with `--cc-client ID:SECRET`,
  checking client authentication (client_secret_post or client_secret_basic) and `resource`;
- POST /test/expire revokes every access token (their refresh tokens stay valid);
  POST /test/ttl?seconds=N sets the lifetime of tokens issued from then on;
- every issued token, refresh, and bearer check is appended to `--log FILE` as one JSON
  object per line: {"event": "issued"|"refreshed"|"client_credentials"|"verified"|"rejected",
  "token": …, …}.

Usage: oauth_server.py --port PORT [--log FILE] [--cc-client ID:SECRET] [--ttl SECONDS]
"""

import argparse
import base64
import json
import secrets
import time

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--log")
parser.add_argument("--cc-client")
parser.add_argument("--ttl", type=int, default=3600)
args = parser.parse_args()

ISSUER = f"http://127.0.0.1:{args.port}"
RESOURCE = f"{ISSUER}/mcp"
SCOPE = "mcp"


def log(event: str, **fields) -> None:
    if args.log:
        with open(args.log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "at": time.time(), **fields}) + "\n")


class Provider:
    """An OAuthAuthorizationServerProvider in memory (mcp.server.auth.provider)."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.ttl = args.ttl

    async def get_client(self, client_id: str):
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        log("registered", client_id=client_info.client_id)

    async def authorize(self, client, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="admin",
        )
        log("authorized", client_id=client.client_id, resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=ISSUER)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> tuple[str, str]:
        access = "at-" + secrets.token_urlsafe(24)
        refresh = "rt-" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.ttl,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return access, refresh

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        access, refresh = self._issue(
            client.client_id, authorization_code.scopes, authorization_code.resource, authorization_code.subject
        )
        log("issued", token=access, refresh_token=refresh, client_id=client.client_id)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.ttl,
            scope=" ".join(authorization_code.scopes),
            refresh_token=refresh,
        )

    async def load_refresh_token(self, client, refresh_token: str):
        token = self.refresh.get(refresh_token)
        return token if token and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        scopes = scopes or refresh_token.scopes
        access, refresh = self._issue(client.client_id, scopes, refresh_token.resource, refresh_token.subject)
        log("refreshed", token=access, refresh_token=refresh, old_refresh_token=refresh_token.token)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.ttl,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def load_access_token(self, token: str):
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            log("rejected", token=token)
            return None
        log("verified", token=token)
        return found

    async def revoke_token(self, token) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


provider = Provider()

mcp = MCPServer(
    name="oauth",
    log_level="WARNING",
    auth_server_provider=provider,
    auth=AuthSettings(
        issuer_url=ISSUER,
        resource_server_url=RESOURCE,
        required_scopes=[SCOPE],
        validate_token_resource=True,
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
        ),
    ),
)


@mcp.tool()
def whoami() -> str:
    """Says who the bearer token belongs to."""
    return "admin"


@mcp.resource("oauth://secret", name="secret", mime_type="text/plain")
def secret() -> str:
    return "The vault code is 4711."


app = mcp.streamable_http_app()


async def client_credentials(request: Request, form) -> JSONResponse:
    """RFC 6749 §4.4.2 and §2.3.1: a confidential client, authenticated by HTTP Basic or
    client_secret_post, asks for a token for `resource` (RFC 8707)."""

    def error(code: str, description: str, status: int = 400) -> JSONResponse:
        log("client_credentials_refused", error=code, description=description)
        return JSONResponse({"error": code, "error_description": description}, status_code=status)

    if not args.cc_client:
        return error("unsupported_grant_type", "no client credentials client is configured")
    cc_id, cc_secret = args.cc_client.split(":", 1)
    client_id, client_secret = form.get("client_id"), form.get("client_secret")
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("basic "):
        from urllib.parse import unquote

        decoded = base64.b64decode(auth[6:]).decode()
        client_id, client_secret = (unquote(p) for p in decoded.split(":", 1))
    if client_id != cc_id or client_secret != cc_secret:
        return error("invalid_client", "client authentication failed", 401)
    if form.get("resource") != RESOURCE:
        return error("invalid_target", f"resource must be {RESOURCE}, not {form.get('resource')}")
    scopes = (form.get("scope") or SCOPE).split()
    if any(s != SCOPE for s in scopes):
        return error("invalid_scope", f"only `{SCOPE}` is offered")
    access = "cc-" + secrets.token_urlsafe(24)
    provider.access[access] = AccessToken(
        token=access, client_id=cc_id, scopes=scopes, expires_at=int(time.time()) + provider.ttl, resource=RESOURCE
    )
    log("client_credentials", token=access, client_id=cc_id, auth="basic" if auth else "post")
    return JSONResponse(
        {"access_token": access, "token_type": "Bearer", "expires_in": provider.ttl, "scope": " ".join(scopes)},
        headers={"Cache-Control": "no-store"},
    )


class TestRoutes:
    """The test-only routes, and POST /token with grant_type=client_credentials, in front
    of the SDK's app."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path == "/test/expire":
                provider.access.clear()
                log("expired_all")
                return await JSONResponse({"ok": True})(scope, receive, send)
            if path == "/test/ttl":
                request = Request(scope, receive)
                provider.ttl = int(request.query_params["seconds"])
                return await JSONResponse({"ttl": provider.ttl})(scope, receive, send)
            if path == "/token":
                body = b""
                more = True
                while more:
                    message = await receive()
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                from urllib.parse import parse_qs

                form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
                replayed = False

                async def replay():
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return {"type": "http.request", "body": body, "more_body": False}
                    return await receive()

                if form.get("grant_type") == "client_credentials":
                    request = Request(scope, replay)
                    return await (await client_credentials(request, form))(scope, replay, send)
                return await self.inner(scope, replay, send)
        return await self.inner(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(TestRoutes(app), host="127.0.0.1", port=args.port, log_level="warning")

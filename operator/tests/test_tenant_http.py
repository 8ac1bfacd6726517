"""The operator's HTTP to tenants' Pods against a real HTTP server on loopback that answers in every bad way a Pod
can: too much, too slowly, an error, a lie about its length."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from loopback_http import Replies, serving

from ringfeed_operator.tenant_http import ReplyRefused, request


class Tenant(Replies):
    def do_GET(self):  # the name http.server calls
        if self.path == "/small":
            self.reply(200, b"x" * 100)
        elif self.path == "/large":
            self.reply(200, b"x" * 5000)
        elif self.path == "/error":
            self.reply(500, b"no")
        elif self.path == "/unbounded":  # no Content-Length: streams until the client gives up
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * 1024)
            except OSError:
                pass
        elif self.path == "/drip":  # a byte every 0.2 s: each read in time, the whole never
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass

    def do_POST(self):  # the name http.server calls
        self.reply(200, self.headers.get("Authorization", "").encode())


@pytest.fixture(scope="module")
def tenant() -> Iterator[str]:
    with serving(Tenant) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def test_a_reply_within_bounds_is_read_whole(tenant):
    assert request(f"{tenant}/small", limit_bytes=100, timeout_s=5) == b"x" * 100
    assert request(f"{tenant}/control", method="POST", headers={"Authorization": "Bearer t"}, limit_bytes=100,
                   timeout_s=5) == b"Bearer t"


@pytest.mark.parametrize("path,why", [
    ("/large", "more than 1000 bytes"),  # declared too long
    ("/unbounded", "more than 1000 bytes"),  # never ends
    ("/error", "HTTP 500"),
])
def test_a_reply_out_of_bounds_is_refused(tenant, path, why):
    with pytest.raises(ReplyRefused, match=why):
        request(f"{tenant}{path}", limit_bytes=1000, timeout_s=5)


def test_a_slow_reply_is_cut_at_the_deadline_of_the_whole(tenant):
    started = time.monotonic()
    with pytest.raises((ReplyRefused, OSError)):
        request(f"{tenant}/drip", limit_bytes=10_000, timeout_s=1.0)
    assert time.monotonic() - started < 3  # each byte came within the timeout; the whole did not


def test_only_http_urls_are_asked():
    with pytest.raises(ValueError, match="not an http URL"):
        request("file:///etc/passwd", limit_bytes=10, timeout_s=1)

#!/usr/bin/env python3
"""s3-fault-proxy.py -- an HTTP proxy in front of the rig's S3 server that loses answers.

Usage: s3-fault-proxy.py --listen HOST:PORT --upstream HOST:PORT

Forwards every request to the upstream S3 server, except those a fault rule matches. Rules are
set with `POST /__faults` (a JSON list, replacing the current one) and read with `GET /__faults`:
    {"method": "PUT", "path": "/agent-boxes/boxes/x/meta.json", "action": "drop_after", "count": 1}
`path` matches as a substring; each match uses one of `count` (and a stall, once over, counts
itself in the rule's `stalled`). Actions:
    drop_after   forward (the server applies the write), then close the connection unanswered
    drop_before  close the connection without forwarding
    status500    answer 500 InternalError without forwarding
    stall_after  forward, then hold the answer back for `seconds` (default 25) and close
`POST /__latency` with {"ms": N} delays every request N ms on the way in and N ms on the way out
(a store far away, for benchmarks: this kernel has no netem); {"ms": 0} ends it.
Stdlib only; serves only the rig's own network namespace.
"""
import argparse
import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RULES = []
LOCK = threading.Lock()
LATENCY_S = 0.0


def take_rule(method, path):
    with LOCK:
        for rule in RULES:
            if rule.get("count", 0) > 0 and rule.get("method", method) == method \
                    and rule.get("path", "") in path:
                rule["count"] -= 1
                return rule
    return None


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None

    def log_message(self, fmt, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def answer(self, status, data, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def control(self):
        global RULES
        if self.command == "POST":
            rules = json.loads(self.body() or b"[]")
            with LOCK:
                RULES = rules
        with LOCK:
            data = json.dumps(RULES).encode()
        self.answer(200, data, [("Content-Type", "application/json")])

    def forward(self, body):
        host, port = self.upstream
        conn = http.client.HTTPConnection(host, port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        dropped = ("transfer-encoding", "connection") if self.command == "HEAD" else \
            ("content-length", "transfer-encoding", "connection")
        out = [(k, v) for k, v in resp.getheaders() if k.lower() not in dropped]
        conn.close()
        return resp.status, data, out

    def latency(self):
        global LATENCY_S
        LATENCY_S = json.loads(self.body() or b"{}").get("ms", 0) / 1000.0
        self.answer(200, json.dumps({"ms": LATENCY_S * 1000}).encode(), [("Content-Type", "application/json")])

    def handle_any(self):
        if self.path.startswith("/__faults"):
            return self.control()
        if self.path.startswith("/__latency"):
            return self.latency()
        body = self.body()
        delay = LATENCY_S
        time.sleep(delay)
        rule = take_rule(self.command, self.path) or {}
        action = rule.get("action")
        if action == "drop_before":
            self.close_connection = True
            return
        if action == "status500":
            data = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
            return self.answer(500, data, [("Content-Type", "application/xml")])
        status, data, headers = self.forward(body)
        if action == "drop_after":
            self.close_connection = True
            return
        if action == "stall_after":
            time.sleep(rule.get("seconds", 25))
            with LOCK:
                rule["stalled"] = rule.get("stalled", 0) + 1
            self.close_connection = True
            return
        time.sleep(delay)
        if self.command == "HEAD":
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            return
        self.answer(status, data, headers)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)
    uhost, uport = args.upstream.rsplit(":", 1)
    Proxy.upstream = (uhost, int(uport))
    ThreadingHTTPServer((host, int(port)), Proxy).serve_forever()


if __name__ == "__main__":
    main()

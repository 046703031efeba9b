#!/usr/bin/env python3
"""A small HTTP (and optionally HTTPS) server for the egress tests and benchmark.

usage: egress-server.py ADDR HTTP_PORT [HTTPS_PORT CERT KEY]
Every GET answers 200 with "hello from ADDR:PORT\n" (or N bytes with ?size=N, or "host H\n" with
the request's Host header for /host, "auth A\n" with its Authorization header for /auth); HTTP/1.1 keep-alive.
"""
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        q = parse_qs(urlparse(self.path).query)
        if "size" in q:
            body = b"x" * int(q["size"][0])
        elif urlparse(self.path).path == "/host":
            body = f"host {self.headers.get('Host')}\n".encode()
        elif urlparse(self.path).path == "/auth":
            body = f"auth {self.headers.get('Authorization')}\n".encode()
        else:
            host, port = self.server.server_address[:2]
            body = f"hello from {host}:{port}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(addr, port, tls=None):
    srv = ThreadingHTTPServer((addr, port), Handler)
    srv.daemon_threads = True
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()


def main():
    addr, port = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        tls = (sys.argv[4], sys.argv[5])
        threading.Thread(target=serve, args=(addr, int(sys.argv[3]), tls), daemon=True).start()
    serve(addr, port)


if __name__ == "__main__":
    main()

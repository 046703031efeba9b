"""webhook.py PORT LOG -- a webhook on 127.0.0.1 for tests: each POST body is appended to LOG
as one line; GET answers 200 (ready)."""
import http.server
import sys

PORT, LOG = int(sys.argv[1]), sys.argv[2]
open(LOG, "wb").close()


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with open(LOG, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", PORT), Hook).serve_forever()

"""webhook.py PORT LOG [CERT KEY] -- a webhook on 127.0.0.1 for tests: each POST body is
appended to LOG as one line; GET answers 200 (ready). With CERT and KEY it speaks TLS."""
import http.server
import ssl
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


server = http.server.HTTPServer(("127.0.0.1", PORT), Hook)
if len(sys.argv) == 5:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(sys.argv[3], sys.argv[4])
    server.socket = tls.wrap_socket(server.socket, server_side=True)
server.serve_forever()

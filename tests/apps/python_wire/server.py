"""Python's own http.server in the ways that show on the wire, for kiln's wire findings.

    python3 server.py MODE

MODE:
- split: HTTP/1.1 keep-alive with the handler's default unbuffered writes: the headers go
  in one write and the body in a second, which Nagle's algorithm holds until the client
  acknowledges the first (a delayed ACK: ~40 ms a response on Linux);
- buffered: the same with a buffered wfile (wbufsize = -1): one write a response, the fix;
- slow: buffered, and 40 ms of work (a sleep) before answering: slow, in one write;
- close: HTTP/1.0, a connection closed after each response.

Prints "listening on PORT" once it accepts connections on 127.0.0.1.
"""

import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[1]
BODY = b"x" * 200


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0" if MODE == "close" else "HTTP/1.1"
    wbufsize = 0 if MODE == "split" else -1

    def do_GET(self):
        if MODE == "slow":
            time.sleep(0.040)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()

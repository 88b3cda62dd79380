"""A local HTTP server of one file for the `orchard pull URL` tests (no network): honours Range requests,
and can cut its first full answer short to simulate an interrupted transfer.

usage: range_server.py FILE PORT_FILE LOG_FILE [--cut-after BYTES] [--status CODE]
Writes the port it listens on to PORT_FILE, and one line per request to LOG_FILE ("GET <range or ->").
"""
import argparse
import http.server
import os
import re
import socketserver


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("port_file")
    parser.add_argument("log_file")
    parser.add_argument("--cut-after", type=int, default=0, help="the first full GET stops after this many bytes")
    parser.add_argument("--status", type=int, default=0, help="answer every request with this status")
    args = parser.parse_args()
    data = open(args.file, "rb").read()
    state = {"cut": args.cut_after}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            rng = self.headers.get("Range")
            with open(args.log_file, "a") as log:
                log.write(f"GET {rng or '-'}\n")
            if args.status:
                self.send_response(args.status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = 0
            m = re.fullmatch(r"bytes=(\d+)-", rng or "")
            if m:
                start = int(m.group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if state["cut"] and not m:
                self.wfile.write(body[: state["cut"]])
                self.wfile.flush()
                state["cut"] = 0
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()

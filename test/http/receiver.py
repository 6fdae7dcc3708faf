#!/usr/bin/python3
"""An HTTP endpoint for the tests of HTTP routes (webhooks).

It listens on 127.0.0.1, answers each path as it is told, checks the
Standard Webhooks signature of every request with its own implementation
of the specification, and writes one JSON line per request to a log file
that the test reads.  Python 3's standard library only.

    receiver.py --log FILE [--port N] [--port-file FILE] [--host ADDR]
                [--cert PEM --key PEM] [--secret whsec_...]...
                [--path 'PATH=JSON']... [--control FILE]
    receiver.py sign SECRET MSG_ID TIMESTAMP BODY

The first form prints the port it listens on (useful with --port 0, the
default) on a line of its own once it accepts connections.  The second
prints the signature 'v1,<base64>' of BODY, as a sender computes it.

What a path answers is a JSON object (a "behaviour"):

    {}                                    200, empty body
    {"status": 503, "body": "...", "headers": {"X-A": "b"}}
    {"status": 429, "retry_after": "7"}   Retry-After: 7 (any text)
    {"status": 503, "retry_after_date": 30}
                                          Retry-After: the HTTP date 30 s
                                          after the answer
    {"redirect": "/elsewhere"}            302 Location: http(s)://host/elsewhere
                                          ("status" may say 301, 307...)
    {"hang": true}                        reads the request, never answers;
                                          the log gets a "closed" event when
                                          the client gives up
    {"drop": true}                        reads the request, closes the
                                          connection without an answer
    {"delay_ms": 1500, ...}               answers after that long
    {"status": 500, "first": 2}           500 to the first 2 requests of the
                                          path (under this behaviour), then
                                          200
    {"body_size": 5120, "body": "x"}      the body repeated up to that many
                                          bytes

Behaviours come from --path (PATH=JSON, repeatable) and from the control
file, read again whenever it changes:

    {"secrets": ["whsec_..."],           replaces the --secret list
     "paths": {"/hook": {...}, ...},     per path (exact, no query string)
     "default": {...}}                   for any other path (else 200)

Write the control file to a temporary name and rename it into place, so
that a request never reads half of it.  A "first" count restarts when the
behaviour of its path changes.

Each line of the log is one event:

    {"event": "request", "seq": 1, "time": <unix seconds, float>,
     "method", "path" (as requested, query included), "version",
     "headers": {lower-case name: value, repeated ones joined by ", "},
     "header_list": [[name, value], ...] (as sent, in order),
     "body" (UTF-8, undecodable bytes replaced), "body_b64" (the bytes),
     "body_len", "tls": bool,
     "signature": "valid" | "invalid" | "absent" | "unchecked" (no secret
                  configured) | "malformed" (id or timestamp missing),
     "verified": bool (any signature matches any configured secret),
     "verified_by": [indexes of the configured secrets that one of the
                  signatures matches: what a receiver knowing only that
                  secret would accept],
     "signatures": ["v1,...", ...] (every entry of the header),
     "timestamp_skew": arrival time - webhook-timestamp (null without one),
     "answer": {"status", "retry_after", "location"} or {"hang": true} or
               {"drop": true}}
    {"event": "closed", "seq": n, "time": t}   a hung request's client left
    {"event": "tls_error", "time": t, "error": "..."}   a failed handshake
"""

import argparse
import base64
import binascii
import email.utils
import hashlib
import hmac
import http.server
import json
import os
import select
import socket
import ssl
import sys
import threading
import time

SECRET_PREFIX = "whsec_"


def secret_key(secret):
    """The HMAC key of a Standard Webhooks secret: the base64 after whsec_."""
    if secret.startswith(SECRET_PREFIX):
        secret = secret[len(SECRET_PREFIX):]
    return base64.b64decode(secret, validate=True)


def sign(key, msg_id, timestamp, body):
    """'v1,' + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))."""
    content = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def parse_signatures(header):
    """The entries of a webhook-signature header: space-separated
    'version,signature' pairs."""
    return [s for s in header.split(" ") if s]


def verify(keys, msg_id, timestamp, body, header):
    """Indexes of the keys that one of the v1 signatures in header matches."""
    matched = []
    given = []
    for entry in parse_signatures(header):
        version, _, sig = entry.partition(",")
        if version != "v1" or not sig:
            continue
        try:
            given.append(base64.b64decode(sig, validate=True))
        except (binascii.Error, ValueError):
            continue
    content = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    for i, key in enumerate(keys):
        expected = hmac.new(key, content, hashlib.sha256).digest()
        # every comparison runs, in constant time each
        hit = False
        for g in given:
            if hmac.compare_digest(expected, g):
                hit = True
        if hit:
            matched.append(i)
    return matched


class Config:
    """The behaviours and secrets: the command line's, overlaid by the
    control file's, which is read again when its mtime or size changes."""

    def __init__(self, paths, secrets, control):
        self.base_paths = paths
        self.base_secrets = secrets
        self.control = control
        self.lock = threading.Lock()
        self.stamp = None
        self.paths = dict(paths)
        self.default = {}
        self.keys = [secret_key(s) for s in secrets]
        self.counts = {}

    def _reload(self):
        if not self.control:
            return
        try:
            st = os.stat(self.control)
        except FileNotFoundError:
            stamp = None
        else:
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self.stamp:
            return
        self.stamp = stamp
        data = {}
        if stamp is not None:
            with open(self.control, encoding="utf-8") as f:
                data = json.load(f)
        self.paths = dict(self.base_paths)
        self.paths.update(data.get("paths", {}))
        self.default = data.get("default", {})
        secrets = data.get("secrets", self.base_secrets)
        self.keys = [secret_key(s) for s in secrets]

    def lookup(self, path):
        """(behaviour, its count of requests so far including this one,
        the secrets' keys) for a request to path."""
        with self.lock:
            self._reload()
            behaviour = self.paths.get(path, self.default)
            tag = path + "\0" + json.dumps(behaviour, sort_keys=True)
            self.counts[tag] = self.counts.get(tag, 0) + 1
            return behaviour, self.counts[tag], list(self.keys)


class Log:
    """The JSON lines file, one writer at a time, each line flushed."""

    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.seq = 0

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def write(self, record):
        line = json.dumps(record, ensure_ascii=True, sort_keys=True)
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "outbox-test-receiver"

    def version_string(self):
        return self.server_version

    def setup(self):
        if self.server.tls is not None:
            self.request.settimeout(10)
            try:
                self.request = self.server.tls.wrap_socket(self.request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                self.server.log.write({"event": "tls_error", "time": time.time(), "error": str(e)})
                raise
            self.request.settimeout(None)
        super().setup()

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def handle_any(self):
        arrival = time.time()
        body = self.read_body()
        path = self.path.split("?", 1)[0]
        behaviour, count, keys = self.server.config.lookup(path)
        seq = self.server.log.next_seq()

        headers = {}
        for name, value in self.headers.items():
            name = name.lower()
            headers[name] = headers[name] + ", " + value if name in headers else value
        msg_id = headers.get("webhook-id")
        stamp = headers.get("webhook-timestamp")
        sig_header = headers.get("webhook-signature")
        signatures = parse_signatures(sig_header) if sig_header is not None else []
        verified_by = []
        if sig_header is None:
            signature = "absent"
        elif not keys:
            signature = "unchecked"
        elif msg_id is None or stamp is None:
            signature = "malformed"
        else:
            verified_by = verify(keys, msg_id, stamp, body, sig_header)
            signature = "valid" if verified_by else "invalid"
        try:
            skew = arrival - int(stamp) if stamp is not None else None
        except ValueError:
            skew = None

        answer = self.plan(behaviour, count)
        self.server.log.write({
            "event": "request",
            "seq": seq,
            "time": arrival,
            "method": self.command,
            "path": self.path,
            "version": self.request_version,
            "headers": headers,
            "header_list": [[n, v] for n, v in self.headers.items()],
            "body": body.decode("utf-8", errors="replace"),
            "body_b64": base64.b64encode(body).decode(),
            "body_len": len(body),
            "tls": self.server.tls is not None,
            "signature": signature,
            "verified": bool(verified_by),
            "verified_by": verified_by,
            "signatures": signatures,
            "timestamp_skew": skew,
            "answer": {k: v for k, v in answer.items() if k != "body"},
        })

        if answer.get("hang"):
            self.hang(seq)
            return
        if answer.get("drop"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if answer.get("delay_ms"):
            time.sleep(answer["delay_ms"] / 1000.0)
        out = answer["body"].encode("utf-8")
        self.send_response(answer["status"])
        if "retry_after" in answer:
            self.send_header("Retry-After", answer["retry_after"])
        if "location" in answer:
            self.send_header("Location", answer["location"])
        for name, value in behaviour.get("headers", {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        self.wfile.flush()

    def plan(self, behaviour, count):
        """What to answer: status, headers and body, or hang or drop."""
        if "first" in behaviour and count > behaviour["first"]:
            return {"status": 200, "body": ""}
        if behaviour.get("hang"):
            return {"hang": True}
        if behaviour.get("drop"):
            return {"drop": True}
        body = behaviour.get("body", "")
        if "body_size" in behaviour:
            unit = body or "x"
            body = (unit * (behaviour["body_size"] // len(unit) + 1))[:behaviour["body_size"]]
        answer = {"status": int(behaviour.get("status", 200)), "body": body}
        if behaviour.get("delay_ms"):
            answer["delay_ms"] = behaviour["delay_ms"]
        if "retry_after" in behaviour:
            answer["retry_after"] = str(behaviour["retry_after"])
        if "retry_after_date" in behaviour:
            answer["retry_after"] = email.utils.formatdate(
                time.time() + behaviour["retry_after_date"], usegmt=True)
        if "redirect" in behaviour:
            target = behaviour["redirect"]
            if target.startswith("/"):
                scheme = "https" if self.server.tls is not None else "http"
                host = self.headers.get("Host") or "%s:%d" % self.server.server_address[:2]
                target = "%s://%s%s" % (scheme, host, target)
            answer["location"] = target
            if "status" not in behaviour:
                answer["status"] = 302
        return answer

    def hang(self, seq):
        """Hold the request unanswered until the client closes its side."""
        self.close_connection = True
        conn = self.connection
        while not self.server.stopping.is_set():
            ready, _, _ = select.select([conn], [], [], 0.2)
            if not ready:
                continue
            try:
                data = conn.recv(4096)
            except (OSError, ssl.SSLError):
                data = b""
            if not data:
                break
        self.server.log.write({"event": "closed", "seq": seq, "time": time.time()})

    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # a client that went away, or a failed TLS handshake (already logged)
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def parse_path_option(text):
    path, sep, spec = text.partition("=")
    if not sep or not path.startswith("/"):
        raise argparse.ArgumentTypeError("expected PATH=JSON, got %r" % text)
    return path, json.loads(spec) if spec else {}


def main(argv):
    if argv and argv[0] == "sign":
        if len(argv) != 5:
            print("usage: receiver.py sign SECRET MSG_ID TIMESTAMP BODY", file=sys.stderr)
            return 2
        secret, msg_id, ts, body = argv[1:]
        print(sign(secret_key(secret), msg_id, int(ts), body.encode("utf-8")))
        return 0

    p = argparse.ArgumentParser(description="HTTP receiver for the tests of HTTP routes")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--log", required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--secret", action="append", default=[])
    p.add_argument("--path", action="append", default=[], type=parse_path_option)
    p.add_argument("--control")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if bool(args.cert) != bool(args.key):
        p.error("--cert and --key go together")

    server = Server((args.host, args.port), Handler)
    server.config = Config(dict(args.path), args.secret, args.control)
    server.log = Log(args.log)
    server.verbose = args.verbose
    server.stopping = threading.Event()
    server.tls = None
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        server.tls = ctx
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, args.port_file)
    print(port, flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

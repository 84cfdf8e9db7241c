"""A gRPC origin over TLS for the HTTP/2 suite (Debian's python3-grpcio, generic handlers: the
messages are raw bytes, no generated code). Usage: grpc_origin.py HOST PORT CERT KEY; prints
"ready" once it listens. ORIGIN_AUTH: the Authorization value sluice must add; each call says in
its trailing metadata (x-saw-auth: yes/no) whether it arrived, never the value itself.

  /pkg.Allowed/Echo    unary: the request back
  /pkg.Allowed/Stream  server-streaming: N messages "m0".."m{N-1}" (N is the request, in ASCII)
  /pkg.Allowed/Big     server-streaming: N messages of 1 MiB each, bytes from a fixed seed
  /pkg.Allowed/Sum     client-streaming: the total length received, in ASCII
  /pkg.Allowed/Chat    bidirectional: each message back reversed, as it arrives
  /pkg.Allowed/Missing unary: NOT_FOUND with a message
  /pkg.Service/Delete  unary: "deleted" (sluice's policy refuses it before it gets here)
"""
import concurrent.futures
import os
import sys

import grpc

EXPECTED = os.environ.get("ORIGIN_AUTH", "")
MIB = bytes(range(256)) * 4096


def saw_auth(ctx):
    auth = dict(ctx.invocation_metadata()).get("authorization", "")
    ctx.set_trailing_metadata((("x-saw-auth", "yes" if EXPECTED and auth == EXPECTED else "no"),))


def echo(req, ctx):
    saw_auth(ctx)
    return req


def stream(req, ctx):
    saw_auth(ctx)
    for i in range(int(req)):
        yield b"m%d" % i


def big(req, ctx):
    saw_auth(ctx)
    for _ in range(int(req)):
        yield MIB


def total(it, ctx):
    saw_auth(ctx)
    return str(sum(len(m) for m in it)).encode()


def chat(it, ctx):
    saw_auth(ctx)
    for m in it:
        yield m[::-1]


def missing(req, ctx):
    ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing here")


def delete(req, ctx):
    return b"deleted"


HANDLERS = {
    "/pkg.Allowed/Echo": grpc.unary_unary_rpc_method_handler(echo),
    "/pkg.Allowed/Stream": grpc.unary_stream_rpc_method_handler(stream),
    "/pkg.Allowed/Big": grpc.unary_stream_rpc_method_handler(big),
    "/pkg.Allowed/Sum": grpc.stream_unary_rpc_method_handler(total),
    "/pkg.Allowed/Chat": grpc.stream_stream_rpc_method_handler(chat),
    "/pkg.Allowed/Missing": grpc.unary_unary_rpc_method_handler(missing),
    "/pkg.Service/Delete": grpc.unary_unary_rpc_method_handler(delete),
}


class Handler(grpc.GenericRpcHandler):
    def service(self, details):
        return HANDLERS.get(details.method)


def main():
    host, port, cert, key = sys.argv[1:5]
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(16),
                         options=[("grpc.max_receive_message_length", 64 << 20)])
    server.add_generic_rpc_handlers((Handler(),))
    creds = grpc.ssl_server_credentials([(open(key, "rb").read(), open(cert, "rb").read())])
    server.add_secure_port("%s:%s" % (host, port), creds)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()

"""A push receiver for the interop tests built from the Python reference SDK's own types
(a2a-sdk 1.3.0): every POST body is parsed as the SDK's protobuf `StreamResponse` with protobuf's
JSON parser (strictly: an unknown field is an error), served over HTTPS by uvicorn with the test
certificate on 127.0.0.1.

Each request is recorded with its headers, which payload the parse found and the parsed message
written back as JSON (`MessageToDict`); GET /control/received answers the records. A body that
does not parse is answered 400 and recorded with the parser's error.

Usage: python python_receiver.py --cert CERT --key KEY
Prints one JSON line {"ready": true, "url": ...} on stdout once it listens; stops on stdin EOF.
"""

import argparse
import asyncio
import json
import socket
import sys

import uvicorn
from google.protobuf.json_format import MessageToDict, Parse, ParseError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.types.a2a_pb2 import StreamResponse

received: list[dict] = []


async def receive_push(request: Request) -> JSONResponse:
    text = (await request.body()).decode('utf-8')
    record = {
        'path': request.url.path,
        'headers': dict(request.headers),
        'body': text,
    }
    received.append(record)
    try:
        message = Parse(text, StreamResponse())
    except ParseError as err:
        record['error'] = str(err)
        return JSONResponse({'error': str(err)}, status_code=400)
    record['payload'] = message.WhichOneof('payload')
    record['parsed'] = MessageToDict(message)
    return JSONResponse({'ok': True})


async def get_received(_: Request) -> JSONResponse:
    return JSONResponse({'received': received})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--cert', required=True)
    ap.add_argument('--key', required=True)
    args = ap.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(('127.0.0.1', 0))
    url = f'https://127.0.0.1:{sock.getsockname()[1]}'

    app = Starlette(
        routes=[
            Route('/control/received', get_received, methods=['GET']),
            Route('/{path:path}', receive_push, methods=['POST']),
        ]
    )
    config = uvicorn.Config(
        app,
        ssl_certfile=args.cert,
        ssl_keyfile=args.key,
        log_level='warning',
        lifespan='off',
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                serving.result()
                return
            await asyncio.sleep(0.02)
        print(json.dumps({'ready': True, 'url': url}), flush=True)
        await loop.run_in_executor(None, sys.stdin.read)
        server.should_exit = True
        await serving

    asyncio.run(run())


if __name__ == '__main__':
    main()

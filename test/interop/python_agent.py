"""A controllable A2A v1.0 agent for the interop tests, built on the Python reference SDK
(a2a-sdk 1.3.0): its DefaultRequestHandler, InMemoryTaskStore, InMemoryPushNotificationConfigStore
and BasePushNotificationSender, behind its own Starlette routes (agent card, JSON-RPC, HTTP+JSON),
served over HTTPS by uvicorn with the test certificate on 127.0.0.1.

Every task it runs answers WORKING at once and then waits for commands on the loopback control
route (POST /control/tasks/{id}/state {"state": "TASK_STATE_INPUT_REQUIRED" | ...}); each command
becomes a TaskStatusUpdateEvent of the SDK, which the SDK's handler pushes to every config of the
task. A terminal state ends the task; INPUT_REQUIRED ends this execution, and a follow-up
SendMessage to the task resumes it in WORKING, waiting for the next command.

The control routes also report what the SDK's push sender did (GET /control/pushes: each request
it made, with headers, body and the answer, recorded by httpx event hooks on the sender's own
client, and the sender's log records) and which A2A calls arrived (GET /control/calls).

Usage: python python_agent.py --cert CERT --key KEY --ca CA [--transport JSONRPC|HTTP+JSON]
Prints one JSON line {"ready": true, "url": ...} on stdout once it listens; stops on stdin EOF.
"""

import argparse
import asyncio
import json
import logging
import socket
import ssl
import sys
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

JSONRPC_PATH = '/a2a/jsonrpc'
REST_PATH = '/a2a/rest'
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}

# Each running task's command queue: the executor waits on it.
commands: dict[str, asyncio.Queue] = {}
pushes: list[dict] = []
sender_logs: list[dict] = []
calls: list[dict] = []


class RecordSenderLogs(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        sender_logs.append(
            {
                'level': record.levelname,
                'message': record.getMessage(),
                'exception': record.exc_info[0].__name__ if record.exc_info else None,
                'at': time.time(),
            }
        )


class CommandedExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        context_id = context.context_id
        queue = commands.setdefault(task_id, asyncio.Queue())
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
                    history=[context.message] if context.message else [],
                )
            )
        else:
            # A follow-up message to an interrupted task resumes it in WORKING.
            await event_queue.enqueue_event(
                TaskStatusUpdateEvent(
                    task_id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
                )
            )
        while True:
            state = await queue.get()
            await event_queue.enqueue_event(
                TaskStatusUpdateEvent(
                    task_id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=state),
                )
            )
            if state == TaskState.TASK_STATE_INPUT_REQUIRED:
                return
            if state in TERMINAL:
                commands.pop(task_id, None)
                return

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--cert', required=True)
    ap.add_argument('--key', required=True)
    ap.add_argument('--ca', required=True)
    ap.add_argument('--transport', default='JSONRPC')
    args = ap.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    url = f'https://127.0.0.1:{port}'

    interfaces = [
        AgentInterface(url=f'{url}{JSONRPC_PATH}', protocol_binding='JSONRPC', protocol_version='1.0'),
        AgentInterface(url=f'{url}{REST_PATH}', protocol_binding='HTTP+JSON', protocol_version='1.0'),
    ]
    if args.transport == 'HTTP+JSON':
        interfaces.reverse()
    card = AgentCard(
        name='a2a-push python test agent',
        description='A controllable agent on the Python A2A SDK',
        version='1.0.0',
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=False, push_notifications=True),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[AgentSkill(id='echo', name='echo', description='answers WORKING', tags=['test'])],
    )

    async def on_request(request: httpx.Request) -> None:
        body = request.content.decode('utf-8')
        request.extensions['a2a_push_record'] = record = {
            'url': str(request.url),
            'method': request.method,
            'headers': dict(request.headers),
            'body': body,
            'at': time.time(),
        }
        pushes.append(record)

    async def on_response(response: httpx.Response) -> None:
        record = response.request.extensions.get('a2a_push_record')
        if record is not None:
            record['status'] = response.status_code
            record['answeredAt'] = time.time()

    # The sender's own client, as an application passes it: the test CA trusted, httpx defaults otherwise.
    client = httpx.AsyncClient(
        verify=ssl.create_default_context(cafile=args.ca),
        event_hooks={'request': [on_request], 'response': [on_response]},
    )
    push_store = InMemoryPushNotificationConfigStore()
    sender = BasePushNotificationSender(client, push_store)
    handler = DefaultRequestHandler(
        agent_executor=CommandedExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=push_store,
        push_sender=sender,
    )
    sender_log = logging.getLogger('a2a.server.tasks.base_push_notification_sender')
    sender_log.setLevel(logging.INFO)
    sender_log.addHandler(RecordSenderLogs())

    async def set_state(request: Request) -> JSONResponse:
        task_id = request.path_params['id']
        state = TaskState.Value((await request.json())['state'])
        queue = commands.get(task_id)
        if queue is None:
            return JSONResponse({'error': f'no running task {task_id}'}, status_code=404)
        await queue.put(state)
        return JSONResponse({'ok': True})

    async def get_pushes(_: Request) -> JSONResponse:
        return JSONResponse({'pushes': pushes, 'logs': sender_logs})

    async def get_calls(_: Request) -> JSONResponse:
        return JSONResponse({'calls': calls})

    async def get_configs(request: Request) -> JSONResponse:
        configs = await push_store.get_info_for_dispatch(request.path_params['id'])
        return JSONResponse(
            {
                'configs': [
                    {
                        'id': c.id,
                        'url': c.url,
                        'token': c.token,
                        'scheme': c.authentication.scheme,
                        'credentials': c.authentication.credentials,
                    }
                    for c in configs
                ]
            }
        )

    # The control routes go first: the SDK's REST routes end with a catch-all Mount('/{tenant}').
    routes = [
        Route('/control/tasks/{id}/state', set_state, methods=['POST']),
        Route('/control/tasks/{id}/configs', get_configs, methods=['GET']),
        Route('/control/pushes', get_pushes, methods=['GET']),
        Route('/control/calls', get_calls, methods=['GET']),
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, JSONRPC_PATH),
        *create_rest_routes(handler, path_prefix=REST_PATH),
    ]
    starlette_app = Starlette(routes=routes)

    async def app(scope, receive, send):
        """Records each A2A call (not the control routes) with its headers and JSON-RPC method."""
        if scope['type'] != 'http' or scope['path'].startswith('/control/'):
            return await starlette_app(scope, receive, send)
        headers = {k.decode('latin-1'): v.decode('latin-1') for k, v in scope['headers']}
        call = {
            'method': scope['method'],
            'path': scope['path'],
            'rpcMethod': None,
            'a2aVersion': headers.get('a2a-version'),
            'authorization': headers.get('authorization'),
        }
        calls.append(call)
        chunks: list[bytes] = []

        async def recording_receive():
            message = await receive()
            if message['type'] == 'http.request':
                chunks.append(message.get('body', b''))
                if not message.get('more_body') and scope['path'] == JSONRPC_PATH:
                    try:
                        call['rpcMethod'] = json.loads(b''.join(chunks)).get('method')
                    except (ValueError, AttributeError):
                        pass
            return message

        return await starlette_app(scope, recording_receive, send)

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
        # Stop when the test closes stdin (or dies).
        await loop.run_in_executor(None, sys.stdin.read)
        server.should_exit = True
        await serving
        await client.aclose()

    asyncio.run(run())


if __name__ == '__main__':
    main()

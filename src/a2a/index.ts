export {
  INTERRUPTED_STATES,
  TERMINAL_STATES,
  classifyRemoteError,
  connectRemoteAgent,
  type RemoteAgent,
  type RemoteAgentOptions,
  type RemoteFailure,
  type RemoteResult,
  type RemoteTaskView,
} from './remote';

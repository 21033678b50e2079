/** A free TCP port on 127.0.0.1 (closed again before it is used): the cluster script's, one for all tests. */
export { freePort } from '../../scripts/cluster/cluster';

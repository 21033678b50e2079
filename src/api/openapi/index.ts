/*
 * The OpenAPI 3.1 document of the management API, served at /v1/openapi.json: the named schemas
 * (components.ts, from the zod schemas that validate the requests and shape the answers), the
 * operations (operations.ts) and the document built from both (document.ts).
 */
export { openApiDocument } from './document';
export { OPERATIONS, TAGS, type Operation } from './operations';
export { REQUEST_SCHEMAS, RESPONSE_SCHEMAS } from './components';

export const VERSION: string = (require('../package.json') as { version: string }).version;
export const USER_AGENT = `a2a-push/${VERSION}`;

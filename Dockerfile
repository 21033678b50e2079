# syntax=docker/dockerfile:1
# a2a-push: one image for the three processes; the command picks one (`api`, `inbox` or `worker`).
# Untested here (no Docker engine on the build machine); see docker-compose.yml and
# test/unit/compose.test.ts.

# --- build: compile src/ with tsc into dist/src -----------------------------------------------
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the postinstall step fetches the Temporal CLI and test server from PyPI for
# `npm start` and the tests; the image needs neither (and has no Python).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
# Only src/ is in the context (test/, scripts/ are not), so tsc compiles the service alone.
RUN npm run build

# --- runtime: production dependencies, the compiled code, the migrations -----------------------
FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist/src ./dist/src
# src/db/pool.ts reads the SQL migrations from __dirname/migrations; tsc does not copy them.
COPY src/db/migrations ./dist/src/db/migrations
# src/version.ts requires '../package.json', which from dist/src/version.js is dist/package.json.
COPY package.json ./dist/package.json
USER node
EXPOSE 3000 3001 3002
ENTRYPOINT ["node", "dist/src/main.js"]
CMD ["api"]

export default async function globalTeardown(): Promise<void> {
  const child = globalThis.__A2A_TEST_SERVICES__;
  if (!child || child.exitCode !== null) return;
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.stdin?.end();
    setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
  });
}

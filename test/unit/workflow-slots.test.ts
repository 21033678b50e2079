import { LocalAttemptClock, POLL_ROOM, workflowSlotSupplier } from '../../src/worker/workflow-slots';

const ctx = {
  slotType: 'workflow' as const,
  taskQueue: 'q',
  workerIdentity: 'w',
  workerBuildId: '',
  isSticky: false,
};
const info = { type: 'workflow' as const, workflowType: 'deliveryWorkflowLean', isSticky: false };

describe('LocalAttemptClock', () => {
  it('counts the attempts out longer than a time', () => {
    let now = 0;
    const clock = new LocalAttemptClock(() => now);
    const a = clock.begin();
    now = 500;
    clock.begin();
    now = 1_200;
    expect(clock.olderThan(1_000)).toBe(1);
    expect(clock.olderThan(500)).toBe(2);
    clock.end(a);
    expect(clock.olderThan(500)).toBe(1);
  });
});

describe('workflowSlotSupplier (the lean type’s workflow task slots)', () => {
  it('issues `active` slots; past them a poll waits and an eager start is refused', async () => {
    const s = workflowSlotSupplier(2, 10, new LocalAttemptClock());
    await s.reserveSlot(ctx, new AbortController().signal);
    expect(s.tryReserveSlot(ctx)).toEqual({});
    expect(s.tryReserveSlot(ctx)).toBeNull();
    let granted = false;
    const poll = s.reserveSlot(ctx, new AbortController().signal).then(() => (granted = true));
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
    // A slot given back (its task done) goes to the waiting poll.
    s.markSlotUsed({ permit: {}, slotInfo: info });
    s.releaseSlot({ permit: {}, slotInfo: info });
    await poll;
    expect(granted).toBe(true);
    expect(s.inProgress()).toBe(2);
  });

  it('a run whose local attempt has been out over `stuckMs` stops counting, up to the hard cap', () => {
    let now = 0;
    const clock = new LocalAttemptClock(() => now);
    const s = workflowSlotSupplier(2, 3, clock, 1_000);
    for (let i = 0; i < 2; i++) {
      expect(s.tryReserveSlot(ctx)).toEqual({});
      s.markSlotUsed({ permit: {}, slotInfo: info });
      clock.begin(); // each of those runs is waiting on a local attempt
    }
    expect(s.tryReserveSlot(ctx)).toBeNull();
    now = 1_500;
    // Both attempts hang: the worker may take another task, but not past the hard cap of 3.
    expect(s.inProgress()).toBe(0);
    expect(s.tryReserveSlot(ctx)).toEqual({});
    expect(s.tryReserveSlot(ctx)).toBeNull();
  });

  it('a poll given up (aborted) while it waits takes no slot', async () => {
    const s = workflowSlotSupplier(1, 1, new LocalAttemptClock());
    expect(s.tryReserveSlot(ctx)).toEqual({});
    const abort = new AbortController();
    const poll = s.reserveSlot(ctx, abort.signal);
    abort.abort();
    await expect(poll).rejects.toBeDefined();
    // A slot given back unused (no slotInfo), then the next poll gets it.
    s.releaseSlot({ permit: {} });
    expect(s.inProgress()).toBe(0);
    await s.reserveSlot(ctx, new AbortController().signal);
    expect(s.inProgress()).toBe(1);
  });

  it('a waiting poll gets a slot that frees by time alone (an attempt passing stuckMs)', async () => {
    const clock = new LocalAttemptClock();
    const s = workflowSlotSupplier(1, 5, clock, 40);
    expect(s.tryReserveSlot(ctx)).toEqual({});
    s.markSlotUsed({ permit: {}, slotInfo: info });
    clock.begin();
    const t0 = Date.now();
    await s.reserveSlot(ctx, new AbortController().signal);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(30);
    expect(s.inProgress()).toBe(1);
  });

  it('a poll aborted before it asks is refused with the signal’s reason, and takes no slot', async () => {
    const s = workflowSlotSupplier(1, 1, new LocalAttemptClock());
    const abort = new AbortController();
    abort.abort('Request Cancelled');
    await expect(s.reserveSlot(ctx, abort.signal)).rejects.toBe('Request Cancelled');
    expect(s.inProgress()).toBe(0);
  });

  it('forgets an attempt out longer than its start-to-close timeout', () => {
    let now = 0;
    const clock = new LocalAttemptClock(() => now);
    clock.begin();
    now = 2_000;
    expect(clock.olderThan(1_000)).toBe(1);
    now = 4 * 60_000;
    expect(clock.olderThan(1_000)).toBe(0);
  });
});

describe('workflowSlotSupplier with eager slots (EAGER_START_SLOTS)', () => {
  it('an eager start gets a slot of its own while `active` are in progress; its task counts as in progress, so a poll waits', async () => {
    // active 3: eagerly started tasks count against the polls up to 3 - POLL_ROOM = 1.
    expect(POLL_ROOM).toBe(2);
    const s = workflowSlotSupplier(3, 10, new LocalAttemptClock(), 1_000, 2);
    const polled = async () => {
      await s.reserveSlot(ctx, new AbortController().signal);
      s.markSlotUsed({ permit: {}, slotInfo: info });
    };
    await polled();
    await polled();
    // Two polled tasks run; eager starts still get their own slots, up to 2.
    const e1 = s.tryReserveSlot(ctx);
    const e2 = s.tryReserveSlot(ctx);
    expect(e1).toEqual({ eager: true });
    expect(e2).toEqual({ eager: true });
    expect(s.tryReserveSlot(ctx)).toBeNull();
    s.markSlotUsed({ permit: e1!, slotInfo: info });
    s.markSlotUsed({ permit: e2!, slotInfo: info });
    expect(s.eagerInProgress()).toBe(2);
    expect(s.inProgress()).toBe(4);
    // 2 polled + 1 eager counted = 3: the next poll waits.
    let granted = false;
    const poll = s.reserveSlot(ctx, new AbortController().signal).then(() => (granted = true));
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
    // An eager task's slot given back frees an eager slot (the other still counts): the poll waits on.
    s.releaseSlot({ permit: e1!, slotInfo: info });
    expect(s.eagerInProgress()).toBe(1);
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
    // A polled task ends: now the poll goes on.
    s.releaseSlot({ permit: {}, slotInfo: info });
    await poll;
    expect(granted).toBe(true);
    // An eager permit given back unused (the server did not start eagerly) frees its slot.
    const e3 = s.tryReserveSlot(ctx);
    expect(e3).toEqual({ eager: true });
    expect(s.tryReserveSlot(ctx)).toBeNull();
    s.releaseSlot({ permit: e3! });
    expect(s.eagerInProgress()).toBe(1);
  });

  it('eager tasks past `active - POLL_ROOM` never keep the polls out: several tenants’ eager work leaves the queue its room', async () => {
    const s = workflowSlotSupplier(4, 50, new LocalAttemptClock(), 1_000, 10);
    for (let i = 0; i < 10; i++) {
      const p = s.tryReserveSlot(ctx);
      expect(p).toEqual({ eager: true });
      s.markSlotUsed({ permit: p!, slotInfo: info });
    }
    // 10 eager tasks in progress count as 2 (4 - POLL_ROOM) against the polls: 2 polls still get slots.
    await s.reserveSlot(ctx, new AbortController().signal);
    await s.reserveSlot(ctx, new AbortController().signal);
    let granted = false;
    void s.reserveSlot(ctx, new AbortController().signal).then(() => (granted = true));
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
  });

  it('the hard cap bounds polls and eager starts together', async () => {
    const s = workflowSlotSupplier(2, 3, new LocalAttemptClock(), 1_000, 5);
    await s.reserveSlot(ctx, new AbortController().signal);
    await s.reserveSlot(ctx, new AbortController().signal);
    expect(s.tryReserveSlot(ctx)).toEqual({ eager: true });
    expect(s.tryReserveSlot(ctx)).toBeNull();
  });
});

import { temporal } from '@temporalio/proto';

type History = temporal.api.history.v1.IHistory;
const HistoryMessage = temporal.api.history.v1.History;

// The SDK's historyToJSON/historyFromJSON mix two copies of protobufjs in this install (common's and
// proto's: "type must be a Type"), so histories are saved with the generated message's own
// toObject (int64 as strings, enums by name, bytes as base64) and loaded back with fromObject.
export const historyToObject = (h: History): Record<string, unknown> =>
  HistoryMessage.toObject(HistoryMessage.fromObject(h), { longs: String, enums: String, bytes: String });

export const historyFromObject = (o: Record<string, unknown>): History => HistoryMessage.fromObject(o);

/** Every payload a saved history holds, decoded to text (histories store payload data as base64). */
export function decodedPayloads(history: unknown): string[] {
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(walk);
    if (typeof v !== 'object' || v === null) return;
    const o = v as Record<string, unknown>;
    if (typeof o.data === 'string' && typeof o.metadata === 'object' && o.metadata !== null)
      out.push(Buffer.from(o.data, 'base64').toString('utf8'));
    for (const x of Object.values(o)) walk(x);
  };
  walk(history);
  return out;
}

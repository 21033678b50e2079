/**
 * Finds the raw text of a top-level member's value in a JSON object text, so that a value can be kept
 * byte for byte (key order, spacing, number spelling) as the client sent it. The text must already
 * have parsed with JSON.parse. Like JSON.parse, the last occurrence of a duplicate key wins.
 */
export function rawMemberText(json: string, key: string): string | undefined {
  let i = 0;
  const ws = () => {
    while (i < json.length && ' \t\n\r'.includes(json[i]!)) i++;
  };
  const skipString = () => {
    i++; // opening quote
    while (json[i] !== '"') i += json[i] === '\\' ? 2 : 1;
    i++;
  };
  const skipValue = () => {
    ws();
    const c = json[i];
    if (c === '"') return skipString();
    if (c === '{' || c === '[') {
      let depth = 0;
      do {
        const d = json[i];
        if (d === '"') {
          skipString();
          continue;
        }
        if (d === '{' || d === '[') depth++;
        else if (d === '}' || d === ']') depth--;
        i++;
      } while (depth > 0);
      return;
    }
    while (i < json.length && !',}] \t\n\r'.includes(json[i]!)) i++;
  };
  ws();
  if (json[i] !== '{') return undefined;
  i++;
  let found: string | undefined;
  for (;;) {
    ws();
    if (json[i] === '}') return found;
    const keyStart = i;
    skipString();
    const name = JSON.parse(json.slice(keyStart, i)) as string;
    ws();
    i++; // colon
    ws();
    const valueStart = i;
    skipValue();
    if (name === key) found = json.slice(valueStart, i);
    ws();
    if (json[i] === ',') i++;
  }
}

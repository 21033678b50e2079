import { Keyring } from '../../src/sealing/keyring';

describe('keyring', () => {
  const a = Keyring.generateEntry('a');
  const b = Keyring.generateEntry('b');
  it('seals with the active key and unseals by key id', () => {
    const k1 = Keyring.parse(a);
    const s = k1.seal('secret-credential', 'aad');
    expect(s.keyId).toBe('a');
    expect(s.ciphertext.toString('utf8')).not.toContain('secret');
    const k2 = Keyring.parse(`${a},${b}`, 'b');
    expect(k2.unseal(s, 'aad')).toBe('secret-credential');
    expect(k2.seal('x', 'aad').keyId).toBe('b');
  });
  it('refuses a value bound to other associated data or tampered with', () => {
    const k = Keyring.parse(a);
    const s = k.seal('v', 'tenant-1');
    expect(() => k.unseal(s, 'tenant-2')).toThrow();
    const t = { ...s, ciphertext: Buffer.from(s.ciphertext) };
    t.ciphertext[0] = t.ciphertext[0]! ^ 1;
    expect(() => k.unseal(t, 'tenant-1')).toThrow();
  });
  it('names a missing key id', () => {
    const s = Keyring.parse(a).seal('v', 'x');
    expect(() => Keyring.parse(b).unseal(s, 'x')).toThrow('"a"');
  });
  it.each(['', 'nokey', 'k:short', ':AAAA'])('refuses SEAL_KEYS %j', (v) => {
    expect(() => Keyring.parse(v)).toThrow('SEAL_KEYS');
  });
  it('refuses an active key that is not in the ring', () => {
    expect(() => Keyring.parse(a, 'zz')).toThrow('SEAL_ACTIVE_KEY');
  });
});

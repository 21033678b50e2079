import crypto from 'node:crypto';

/** The mask every answer, audit row and log shows in place of a credential. */
export const MASK = '********';

export interface Sealed {
  keyId: string;
  iv: Buffer;
  ciphertext: Buffer;
  tag: Buffer;
}

export class Keyring {
  private readonly keys: Map<string, Buffer>;
  constructor(
    keys: Map<string, Buffer>,
    readonly activeKeyId: string,
  ) {
    if (!keys.has(activeKeyId)) throw new Error(`SEAL_ACTIVE_KEY "${activeKeyId}" is not in SEAL_KEYS`);
    this.keys = keys;
  }

  /** SEAL_KEYS = "kid:base64key,...": each key exactly 32 bytes. The active key defaults to the last one. */
  static parse(sealKeys: string, activeKeyId?: string): Keyring {
    const keys = new Map<string, Buffer>();
    for (const entry of sealKeys
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      const i = entry.indexOf(':');
      const kid = entry.slice(0, i);
      if (i <= 0 || !/^[A-Za-z0-9._-]{1,64}$/.test(kid))
        throw new Error('SEAL_KEYS: each entry is kid:base64key');
      const key = Buffer.from(entry.slice(i + 1), 'base64');
      if (key.length !== 32) throw new Error(`SEAL_KEYS: key "${kid}" must be 32 bytes of base64`);
      if (keys.has(kid)) throw new Error(`SEAL_KEYS: key id "${kid}" appears twice`);
      keys.set(kid, key);
    }
    if (keys.size === 0) throw new Error('SEAL_KEYS: no keys');
    return new Keyring(keys, activeKeyId ?? [...keys.keys()].at(-1)!);
  }

  static generateEntry(kid: string): string {
    return `${kid}:${crypto.randomBytes(32).toString('base64')}`;
  }

  has(keyId: string): boolean {
    return this.keys.has(keyId);
  }

  seal(plaintext: string, aad: string): Sealed {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.keys.get(this.activeKeyId)!, iv);
    cipher.setAAD(Buffer.from(aad));
    const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return { keyId: this.activeKeyId, iv, ciphertext, tag: cipher.getAuthTag() };
  }

  unseal(s: Sealed, aad: string): string {
    const key = this.keys.get(s.keyId);
    if (!key) throw new Error(`sealed value uses key "${s.keyId}", which is not in SEAL_KEYS`);
    const decipher = crypto.createDecipheriv('aes-256-gcm', key, s.iv);
    decipher.setAAD(Buffer.from(aad));
    decipher.setAuthTag(s.tag);
    return Buffer.concat([decipher.update(s.ciphertext), decipher.final()]).toString('utf8');
  }
}

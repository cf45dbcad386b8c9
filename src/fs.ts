/** File-system helpers for commands that write where the user says. */
import fs from 'node:fs/promises';
import path from 'node:path';

/** True when `p` exists and is a directory. */
export async function isDirectory(p: string): Promise<boolean> {
  try {
    return (await fs.stat(p)).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Create `dir` and missing parents. Unlike `fs.mkdir(dir, { recursive: true })`, which on
 * Node 20 loops forever under pseudo file systems such as /proc (mkdir answers ENOENT although
 * the parent exists), this walks up once and fails with the file system's error.
 * @throws the ErrnoException of the first directory that cannot be made.
 */
export async function ensureDir(dir: string): Promise<void> {
  try {
    await fs.mkdir(dir);
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') {
      if (await isDirectory(dir)) return;
      throw err;
    }
    if (code !== 'ENOENT') throw err;
  }
  const parent = path.dirname(dir);
  if (parent === dir) throw Object.assign(new Error(`ENOENT: cannot create directory '${dir}'`), { code: 'ENOENT', syscall: 'mkdir', path: dir });
  await ensureDir(parent);
  try {
    await fs.mkdir(dir);
  } catch (err) {
    // another process may have made it meanwhile
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || !(await isDirectory(dir))) throw err;
  }
}

/**
 * Progress on stderr shared by the long-running commands (`profile`, `train`): a cli-progress
 * bar when stderr is a terminal, else plain lines at every tenth of the work.
 */
import cliProgress from 'cli-progress';

/** A bar on stderr that starts at its first update (so `total` can come with the first report). */
export interface LazyBar {
  update(total: number, value: number, payload?: Record<string, unknown>): void;
  stop(): void;
}

/** A cli-progress bar with `format` (cli-progress tokens) on stderr; `etaBuffer` in updates. */
export function lazyBar(format: string, etaBuffer: number): LazyBar {
  const bar = new cliProgress.SingleBar({ format, etaBuffer, fps: 5, hideCursor: true, stream: process.stderr }, cliProgress.Presets.shades_classic);
  let started = false;
  return {
    update: (total, value, payload) => {
      if (!started) {
        bar.start(total, value, payload);
        started = true;
      } else bar.update(value, payload);
    },
    stop: () => {
      if (started) bar.stop();
    },
  };
}

/**
 * For plain-line progress: `due(done, total)` is true when `done` reached the next tenth of
 * `total` since the last true (then the next tenth is the one after `done`'s).
 */
export function tenths(): { due(done: number, total: number): boolean; skipTo(done: number, total: number): void } {
  let next = 1;
  const skipTo = (done: number, total: number): void => {
    next = Math.floor((10 * done) / total) + 1;
  };
  return {
    due: (done, total) => {
      if (done < Math.ceil((next * total) / 10)) return false;
      skipTo(done, total);
      return true;
    },
    skipTo,
  };
}

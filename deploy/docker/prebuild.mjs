// Image build step (Dockerfile, --build-arg PREBUILD_CONFIG=FILE): start `abacus serve` on FILE
// until it reports ready, which builds the config's models and finds or profiles-and-trains its
// predictor into $ABACUS_CACHE_DIR, then stop it (SIGTERM) and exit with its exit code.
// Only for `sim:` devices: an `ort` predictor measures the CPU it was profiled on, which is the
// build machine here; profile those on the serving machine (a mounted cache volume keeps it).
import { spawn } from 'node:child_process';

const config = process.argv[2];
if (config === undefined || config === '') {
  process.stderr.write('usage: node deploy/docker/prebuild.mjs CONFIG\n');
  process.exit(2);
}
const child = spawn(process.execPath, ['bin/abacus.js', 'serve', '--config', config, '--http-port', '0', '--no-grpc', '--no-exit-with-parent'], { stdio: ['ignore', 'pipe', 'inherit'] });
let out = '';
let stopping = false;
child.stdout.on('data', (d) => {
  out += d.toString();
  process.stdout.write(d);
  if (!stopping && /abacus serve: ready: /.test(out)) {
    stopping = true;
    child.kill('SIGTERM');
  }
});
child.on('exit', (code, signal) => {
  if (!stopping) process.stderr.write(`prebuild: abacus serve exited (${code ?? signal}) before it got ready\n`);
  process.exit(stopping && code === 0 ? 0 : 1);
});

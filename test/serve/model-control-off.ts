/**
 * The one test fake for model control: load and unload answered as a server started without
 * `--model-control explicit` answers them (docs/health.md "Model state and model control"):
 * `forbidden`, naming the model. Fake backends extend it instead of repeating the stubs.
 */
import { ServeError, type InferenceBackend } from '../../src/serve/inference.ts';

export class ModelControlOff implements Pick<InferenceBackend, 'loadModel' | 'unloadModel'> {
  /** @throws (rejects) ServeError forbidden, always. */
  loadModel(name: string): Promise<void> {
    return Promise.reject(new ServeError('forbidden', `load '${name}': model control is off`));
  }

  /** @throws (rejects) ServeError forbidden, always. */
  unloadModel(name: string): Promise<void> {
    return Promise.reject(new ServeError('forbidden', `unload '${name}': model control is off`));
  }
}

/**
 * What the serving backend (`backend.ts`) runs on and asks of the assembly layer: the engine
 * (clock, device, controller, per-model load and unload) and, with model control on, the
 * settings of a model a load request names. Interfaces only, shared by `backend.ts` and
 * `model-control.ts` (docs/design.md, the serving layer).
 */
import type { Clock } from '../clock/clock.ts';
import type { RuntimeOptions } from '../runtime/runtime.ts';
import type { QueryController } from '../schedule/controller.ts';
import type { ServedModel } from './served-model.ts';

/**
 * What `start` runs on: a clock, a device (each served model loaded under its served name by
 * `loadModel`, or already loaded when that is absent), a controller. The front end reaches the device only through the runtime (its type is the
 * runtime's) and closes it at shutdown.
 */
export interface BackendEngine {
  readonly clock: Clock;
  readonly device: RuntimeOptions['device'];
  readonly controller: QueryController;
  /** Called last by `shutdown` (closes the device, …); absent: `device.close()`. */
  close?(): Promise<void>;
  /**
   * Load one served model on the device under its served name, alone, so that a model that
   * cannot load takes no other down (per-model state, "Containment" in docs/health.md).
   * Absent: the device came with every model loaded (`device.load` was called by the opener).
   * @returns a note on how the model is served that the repository index shows as the `reason`
   *   of the READY model (e.g. that its latency is predicted by a fallback until it is profiled);
   *   nothing or '' when it is served like any config model.
   * @throws Error with the reason (a corrupt operator file, a model the predictor cannot score, …).
   */
  loadModel?(name: string): Promise<string | void>;
  /** Free a model on the device (its executor ends). Absent: `device.unload?.(name)`. */
  unloadModel?(name: string): Promise<void>;
}

/**
 * The assembly layer's side of model control (`abacus serve --model-control explicit`): the
 * settings of a model that is not in the config, from a load request.
 */
export interface ModelControl {
  /**
   * The service a load request describes for a model named `name` that is not in the config:
   * `config` is the request's `parameters.config`, the JSON text of ONE config-file service entry
   * (validated with the config file's schema; `model` a zoo or imported model NAME already in the
   * model repository, never a path). Nothing is written to disk.
   * @throws ServeError bad_request naming the field (`parameters.config.qosTargetMs: …`).
   */
  resolve(name: string, config: string): Promise<ServedModel>;
}

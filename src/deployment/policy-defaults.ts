/**
 * Policy parameters that depend on the device (docs/adaptive.md "Defaults on real devices"):
 * on a real device (`ort`) abacus refines its predictor online and keeps the calibration
 * fallback (`refine: true`, `fallback: true`) unless the config sets them; a predictor profiled
 * once, maybe while the machine was busy, is corrected in service rather than trusted. On a
 * simulated device every parameter keeps the paper's default (offline predictor, no fallback),
 * so `simulate` and `reproduce` stay the paper's experiments. Abacus without the group barrier
 * (`barrier: false`) gets the fallback only: it corrects its launch estimates by their own
 * measured ratios instead of refining the predictor (`schedule/abacus/stream.ts`, "Correction").
 */

/** The parameters abacus gets on a real device when the config leaves them out. */
export const REAL_DEVICE_ABACUS_DEFAULTS: Readonly<Record<string, boolean>> = Object.freeze({ refine: true, fallback: true });

/**
 * `params` with the device's defaults filled in where absent (module docs); a copy.
 * @param isSim whether the device is simulated (`sim:…`).
 */
export function withDeviceDefaults(policy: string, params: Readonly<Record<string, unknown>>, isSim: boolean): Record<string, unknown> {
  if (isSim || policy !== 'abacus') return { ...params };
  // Without the group barrier abacus does not refine (`schedule/abacus/stream.ts`), but falls back.
  if (params['barrier'] === false || params['barrier'] === 'false') return { fallback: REAL_DEVICE_ABACUS_DEFAULTS['fallback'], ...params };
  return { ...REAL_DEVICE_ABACUS_DEFAULTS, ...params };
}

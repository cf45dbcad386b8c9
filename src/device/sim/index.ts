/**
 * `device/sim`: simulated accelerators behind the `Device` contract (docs/design.md#device, docs/devices.md).
 * `SimDevice` (the device), the GPU profiles, the cost model and its fitted constants (per
 * profile), the event-driven engine, the calibration against the A100 reference and the
 * measured H200, and the uncontrolled-overlap comparison.
 */
export { SimDevice } from './sim-device.ts';
export type { SimDeviceOptions } from './sim-device.ts';
export { A100_SXM4_40GB, V100_SXM2_32GB, H100_SXM5_80GB, H200_SXM_141GB, GPU_PROFILES, A100_MIG_PROFILES, a100MigProfile, parseSimDeviceId, simDeviceIds, validateSimDrift, SIM_DEVICE_ID_FORMS, RUNTIME_MODES } from './profiles.ts';
export type { GpuProfile, PeakTflops, RuntimeMode, SimDeviceSpec, SimDrift } from './profiles.ts';
export { DEFAULT_SIM_CONSTANTS, H200_GRAPH_SIM_CONSTANTS, SIM_MODEL_REVISION, simConstantsFor, simModelFingerprint, KERNEL_CLASSES, kernelClassOf, operatorClasses, operatorCost, modelCosts, serviceMemoryBytes } from './cost-model.ts';
export type { KernelClass, OpCost, SimConstants } from './cost-model.ts';
export { SimEngine } from './engine.ts';
export type { EngineJob } from './engine.ts';
export {
  ARTIFACT_TOLERANCE,
  BUNDLED_REFERENCE_PATH,
  CALIBRATION_GOALS,
  H200_REFERENCE_PATH,
  artifactReason,
  calibrate,
  loadReference,
  parseReferenceCsv,
  referenceModels,
  simulateGroupMs,
} from './calibrate.ts';
export type { CalibrationOptions, CalibrationPairRow, CalibrationReport, CalibrationSoloRow, CalibrationSummary, CalibrationTarget, GroupQuery, ReferenceData, ReferencePair, ReferenceSolo, SpecsByName } from './calibrate.ts';
export { FIT_PARAMETERS, FIT_START, GRAPH_FIT_PARAMETERS, GRAPH_FIT_START, fitConstants, fitObjective, fitParametersFor } from './fit.ts';
export type { FitParameter, FitResult } from './fit.ts';
export {
  H200_RANDOM_OVERLAP_PATH,
  RANDOM_OVERLAP_TOLERANCE,
  compareRandomOverlap,
  fitGraphConstants,
  fitKernelGrain,
  loadRandomOverlap,
  parseRandomOverlapCsv,
  referenceSeqLens,
  scriptPercentile,
  simulateRandomOverlap,
} from './random-overlap.ts';
export type { GraphFitResult, RandomOverlapComparisonRow, RandomOverlapReport, RandomOverlapRow, RandomOverlapSummary, SimulatedRandomOverlap } from './random-overlap.ts';
export { LogNormalNoise, Rng } from '../../rng.ts';

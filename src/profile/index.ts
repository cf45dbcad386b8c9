/**
 * `profile/`: the overlap profiler (docs/predictor.md "Profiling") — the deterministic sample sequence
 * (`sampler.ts`), the CSV format and its validating reader (`csv.ts`, schema in
 * `dataset.ts`), and `profileDevice` (`profiler.ts`), which measures samples on any Device.
 */
export type { ProfileRow } from './dataset.ts';
export { LATENCY_DECIMALS, formatProfileHeader, formatProfileRow, parseProfileCsv, profileCsvHeader, readProfileCsv } from './csv.ts';
export type { ParsedProfileCsv, ReadProfileCsvOptions } from './csv.ts';
export { MAX_GROUP_SIZE, ProfileSampler, multisetCount, sameSlots, sampleSeed } from './sampler.ts';
export type { Sample, SamplerOptions } from './sampler.ts';
export { describeGroup, profileDevice, runStats, serviceName } from './profiler.ts';
export type { ProfileDeviceOptions, ProfileProgress, ProfileResult, ProfileTarget } from './profiler.ts';

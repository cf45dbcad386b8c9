export { burstyArrivals, constantArrivals, poissonArrivals, traceArrivals } from './arrivals.ts';
export type { ArrivalProcess, BurstyOptions, TraceOptions } from './arrivals.ts';
export { LoadGenerator } from './generator.ts';
export type { Discrete, GeneratedQuery, GeneratorReport, LoadGeneratorOptions, ServiceLoad } from './generator.ts';
export { readLoadTrace } from './trace-file.ts';
export { ARRIVAL_KINDS, ARRIVALS_SYNTAX, arrivalSpecOf, DEFAULT_BURSTY, DEFAULT_TRACE_MINUTE_MS, formatArrivalSpec, loadArrivals, parseArrivalSpec } from './arrival-spec.ts';
export type { ArrivalSpec, ArrivalsFactory } from './arrival-spec.ts';

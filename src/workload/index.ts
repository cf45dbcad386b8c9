export { burstyArrivals, constantArrivals, poissonArrivals, traceArrivals } from './arrivals.ts';
export type { ArrivalProcess, BurstyOptions, TraceOptions } from './arrivals.ts';
export { LoadGenerator } from './generator.ts';
export type { Discrete, GeneratedQuery, GeneratorReport, LoadGeneratorOptions, ServiceLoad } from './generator.ts';
export { readLoadTrace } from './trace-file.ts';

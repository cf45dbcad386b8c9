/**
 * `clock/`: the Clock contract (`clock.ts`) and its two implementations — `WallClock` (real
 * time, for serving) and `VirtualClock` (discrete-event simulation time). Everything
 * time-dependent takes a `Clock`; see `clock.ts`.
 */
export type { Clock, TimerHandle } from './clock.ts';
export { WallClock } from './wall.ts';
export { VirtualClock } from './virtual.ts';
export type { DriveOptions, VirtualClockOptions } from './virtual.ts';
export { driveUntilSettled } from './drive.ts';
export type { DriveUntilSettledOptions } from './drive.ts';

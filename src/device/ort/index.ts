/**
 * `device/ort`: the Device contract on onnxruntime-node — one executor child process per
 * service, one ORT session per operator. See `ort-device.ts` for the design and its numbers.
 */
export { OrtDevice } from './ort-device.ts';
export type { OrtDeviceOptions } from './ort-device.ts';
export type { ExecutorFault } from './executor-handle.ts';

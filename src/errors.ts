/**
 * Error taxonomy with stable string codes (STYLE.md §5). Codes are mapped to HTTP/gRPC
 * statuses only at the serving edge; everywhere else code on `error.code`, never on messages.
 */

/** Stable error codes. */
export type AbacusErrorCode =
  | 'bad_request'
  | 'model_not_found'
  | 'invalid_model'
  | 'invalid_config'
  | 'qos_violation'
  | 'overloaded'
  | 'device_failure'
  | 'device_unavailable';

/** Base class of every domain error; `code` is stable, `message` names the field/model/input. */
export class AbacusError extends Error {
  readonly code: AbacusErrorCode;
  constructor(code: AbacusErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'AbacusError';
  }
}

/** A model file or graph that cannot be used: not ONNX, truncated, cyclic, missing external data. */
export class InvalidModelError extends AbacusError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('invalid_model', message, options);
    this.name = 'InvalidModelError';
  }
}

/** Anything an executor or device reports about a failed run; the device itself stays usable. */
export class DeviceFailureError extends AbacusError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('device_failure', message, options);
    this.name = 'DeviceFailureError';
  }
}

/** A requested device or execution provider is not present here (e.g. CUDA on a CPU box). */
export class DeviceUnavailableError extends AbacusError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('device_unavailable', message, options);
    this.name = 'DeviceUnavailableError';
  }
}

/** A request whose inputs do not match the service (names, types, shapes, batch size). */
export class BadRequestError extends AbacusError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('bad_request', message, options);
    this.name = 'BadRequestError';
  }
}

/** Turn anything thrown into a message string without losing non-Error values. */
export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/** A config file (or equivalent flags) that cannot be used; the message names the file and field. */
export class InvalidConfigError extends AbacusError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('invalid_config', message, options);
    this.name = 'InvalidConfigError';
  }
}

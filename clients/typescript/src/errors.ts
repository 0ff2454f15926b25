// Typed errors mirroring docs/protocol.md §7.

/** The error codes of §7. The client itself raises only bad_request, unavailable, corrupt and internal. */
export type ErrorCode =
  | "bad_request"
  | "not_found"
  | "conflict"
  | "too_large"
  | "unknown_format"
  | "invalid"
  | "fenced"
  | "moved"
  | "leased"
  | "busy"
  | "save_id_reused"
  | "unavailable"
  | "corrupt"
  | "internal";

/** The numbers of §7 (Nats-Service-Error-Code), by code. */
export const errorNumbers: Record<ErrorCode, number> = {
  bad_request: 400,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  unknown_format: 415,
  invalid: 422,
  fenced: 409,
  moved: 410,
  leased: 423,
  busy: 429,
  save_id_reused: 409,
  unavailable: 503,
  corrupt: 500,
  internal: 500,
};

/** The error object on the wire: a service error's body, or a save result's `error`. */
export interface WireError {
  code: string;
  message: string;
  index?: number;
  field?: string;
  offset?: number;
  head?: number;
  owner?: string;
  epoch?: number;
  movedTo?: string;
  retryAfterMs?: number;
  version?: number;
  [extra: string]: unknown;
}

/**
 * CheckpointError is every refusal of checkpointd, and every failure of this client to get a
 * trustworthy answer. `code` is one of §7's codes (a code this client does not know is kept as
 * sent); the other fields are set when the refusal carries them.
 */
export class CheckpointError extends Error {
  readonly code: ErrorCode | string;
  /** invalid: the message index, counted from the start of the whole conversation. */
  readonly index?: number;
  /** invalid: the path inside the message, e.g. `content[2].type`. */
  readonly field?: string;
  /** invalid: the byte offset of a syntax error. */
  readonly offset?: number;
  /** busy: how long to wait before trying again. */
  readonly retryAfterMs?: number;
  /** conflict: the session's head version. */
  readonly head?: number;
  /** fenced, leased: the current lease's owner and epoch. */
  readonly owner?: string;
  readonly epoch?: number;
  /** moved: where the session went. */
  readonly movedTo?: string;
  /**
   * save_id_reused: the version the save id already made, of another conversation (§4.3). Nothing
   * was stored; the same save id never succeeds with this conversation: save under a new one.
   */
  readonly version?: number;
  /** The whole error object as received (unknown members included). */
  readonly wire?: WireError;

  constructor(code: ErrorCode | string, message: string, extra: Partial<WireError> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CheckpointError";
    this.code = code;
    if (typeof extra.index === "number") this.index = extra.index;
    if (typeof extra.field === "string") this.field = extra.field;
    if (typeof extra.offset === "number") this.offset = extra.offset;
    if (typeof extra.retryAfterMs === "number") this.retryAfterMs = extra.retryAfterMs;
    if (typeof extra.head === "number") this.head = extra.head;
    if (typeof extra.owner === "string") this.owner = extra.owner;
    if (typeof extra.epoch === "number") this.epoch = extra.epoch;
    if (typeof extra.movedTo === "string") this.movedTo = extra.movedTo;
    if (typeof extra.version === "number") this.version = extra.version;
  }

  /** fromWire makes the error a reply or a result carried. */
  static fromWire(w: WireError): CheckpointError {
    const e = new CheckpointError(
      typeof w.code === "string" && w.code !== "" ? w.code : "internal",
      typeof w.message === "string" ? w.message : JSON.stringify(w),
      w,
    );
    (e as { wire?: WireError }).wire = w;
    return e;
  }
}

export function isCheckpointError(e: unknown, code?: ErrorCode): e is CheckpointError {
  return e instanceof CheckpointError && (code === undefined || e.code === code);
}

export const unavailable = (msg: string, cause?: unknown) => new CheckpointError("unavailable", msg, {}, { cause });
export const corrupt = (msg: string) => new CheckpointError("corrupt", msg);
export const badRequest = (msg: string) => new CheckpointError("bad_request", msg);
export const internal = (msg: string, cause?: unknown) => new CheckpointError("internal", msg, {}, { cause });

// A small typed client over the types openapi-typescript generates from docs/openapi.yaml
// (into ./fencekeeper-api.d.ts, at check time; never committed). scripts/openapi-check.sh
// type-checks it with tsc --strict: if the spec stops describing what a client needs (a
// route, a header, a body, an error code), this stops compiling. The @ts-expect-error
// lines are the other half: the types must also refuse what the server refuses.
import type { components, operations, paths } from "./fencekeeper-api";

type Schemas = components["schemas"];
export type ErrorCode = Schemas["ErrorCode"];
export type PutResult = Schemas["PutResult"];
export type Fence = Schemas["Fence"];
export type TxnOp = Schemas["TxnOp"];
export type TxnOpResult = Schemas["TxnOpResult"];

// The JSON body of an operation's answer with a given status.
type JsonOf<Op extends keyof operations, Status extends keyof operations[Op]["responses"]> =
    operations[Op]["responses"][Status] extends { content: { "application/json": infer B } }
        ? B
        : never;

export type PutAnswer =
    | { status: 200 | 201; body: JsonOf<"putResource", 201>; etag: string }
    | { status: 409; body: JsonOf<"putResource", 409> }
    | { status: 412; body: JsonOf<"putResource", 412> }
    | { status: 400 | 401 | 413 | 422 | 428 | 429 | 431 | 500 | 503 | 504; body: AnyError };

// Every error body any route can send: the union the spec's responses name.
export type AnyError =
    | JsonOf<"putResource", 400>
    | JsonOf<"putResource", 401>
    | JsonOf<"putResource", 409>
    | JsonOf<"putResource", 412>
    | JsonOf<"putResource", 413>
    | JsonOf<"putResource", 422>
    | JsonOf<"putResource", 428>
    | JsonOf<"putResource", 429>
    | JsonOf<"putResource", 431>
    | JsonOf<"putResource", 500>
    | JsonOf<"putResource", 503>
    | JsonOf<"putResource", 504>
    | JsonOf<"getResource", 404>
    | JsonOf<"runOperation", 422>
    | JsonOf<"raiseFloor", 409>
    | JsonOf<"postTransaction", 400>
    | JsonOf<"postTransaction", 409>
    | JsonOf<"postTransaction", 412>
    | JsonOf<"postTransaction", 413>
    | JsonOf<"postTransaction", 422>;

type PutHeaders = operations["putResource"]["parameters"]["header"];

export class FencekeeperClient {
    constructor(
        private readonly base: string,
        private readonly bearer?: string,
    ) {}

    private headers(extra: Record<string, string>): Headers {
        const h = new Headers(extra);
        if (this.bearer) h.set("Authorization", `Bearer ${this.bearer}`);
        return h;
    }

    // Keys may contain '/': each segment is encoded, the slashes kept (docs/api.md#names).
    private static keyPath(key: string): string {
        return key.split("/").map(encodeURIComponent).join("/");
    }

    async put(key: string, body: BodyInit, h: PutHeaders): Promise<PutAnswer> {
        const headers: Record<string, string> = { "Fencing-Token": String(h["Fencing-Token"]) };
        if (h["Fencing-Lock"] !== undefined) headers["Fencing-Lock"] = h["Fencing-Lock"];
        if (h["If-Match"] !== undefined) headers["If-Match"] = h["If-Match"];
        if (h["If-None-Match"] !== undefined) headers["If-None-Match"] = h["If-None-Match"];
        if (h["Idempotency-Key"] !== undefined) headers["Idempotency-Key"] = h["Idempotency-Key"];
        const path: keyof paths = "/v1/resources/{key}";
        const res = await fetch(this.base + path.replace("{key}", FencekeeperClient.keyPath(key)), {
            method: "PUT",
            headers: this.headers(headers),
            body,
        });
        const json: unknown = await res.json();
        switch (res.status) {
            case 200:
            case 201:
                return { status: res.status, body: json as PutResult, etag: res.headers.get("ETag") ?? "" };
            case 409:
                return { status: 409, body: json as JsonOf<"putResource", 409> };
            case 412:
                return { status: 412, body: json as JsonOf<"putResource", 412> };
            default:
                return { status: res.status as 400, body: json as AnyError };
        }
    }

    async fence(lock: string): Promise<Fence | null> {
        const res = await fetch(`${this.base}/v1/fences/${FencekeeperClient.keyPath(lock)}`, {
            headers: this.headers({}),
        });
        if (res.status === 404) return null;
        return (await res.json()) as JsonOf<"getFence", 200>;
    }

    async transact(
        ops: TxnOp[],
        defaults: { token?: number; lock?: string; idempotencyKey?: string } = {},
    ): Promise<TxnOpResult[] | JsonOf<"postTransaction", 409>> {
        const headers: Record<string, string> = { "Content-Type": "application/json" };
        if (defaults.token !== undefined) headers["Fencing-Token"] = String(defaults.token);
        if (defaults.lock !== undefined) headers["Fencing-Lock"] = defaults.lock;
        if (defaults.idempotencyKey !== undefined) headers["Idempotency-Key"] = defaults.idempotencyKey;
        const request: Schemas["TransactionRequest"] = { ops };
        const res = await fetch(`${this.base}/v1/transactions`, {
            method: "POST",
            headers: this.headers(headers),
            body: JSON.stringify(request),
        });
        if (res.status === 200) return ((await res.json()) as JsonOf<"postTransaction", 200>).results;
        return (await res.json()) as JsonOf<"postTransaction", 409>;
    }
}

// What a worker does with each answer: the error code narrows the body's type.
export function explain(e: AnyError): string {
    switch (e.error) {
        case "stale_token":
            // Both forms carry current_token; a resource write's names its lock.
            return "lock" in e
                ? `fenced out of ${e.lock}: fence ${e.current_token}${e.floor ? ` (floor ${e.floor})` : ""}`
                : `floor of '${e.prefix}' is already ${e.current_token}`;
        case "lock_mismatch":
            return `${e.key} belongs to ${e.lock}`;
        case "precondition_failed":
            return `precondition on ${e.key}`;
        case "operation_failed":
            return `SQLSTATE ${e.sqlstate}`;
        case "invalid_token":
        case "invalid_name":
        case "invalid_request":
        case "unauthorized":
        case "not_found":
        case "idempotency_in_progress":
        case "body_too_large":
        case "idempotency_key_reused":
        case "missing_token":
        case "too_many_idempotency_records":
        case "headers_too_large":
        case "internal":
        case "unavailable":
        case "outcome_unknown":
            return e.message;
        default: {
            // Every code a route's responses can carry is handled above.
            const unreachable: never = e;
            return unreachable;
        }
    }
}

// A transaction as in docs/api.md#post-v1transactions: the ops type-check as written.
export const example: TxnOp[] = [
    { op: "put", key: "reports/2026-12-01.csv", body: "a,b\n1,2\n", content_type: "text/csv" },
    { op: "put", key: "reports/index.json", body: '["2026-12-01"]', if_match: 6 },
    { op: "check", lock: "billing", token: 17 },
    { op: "check_version", key: "reports/old.csv", absent: true },
    { op: "operation", name: "ledger_insert", params: [7, "-25.00", "pay-8812"] },
];

export function versionsOf(results: TxnOpResult[]): Record<string, number> {
    const out: Record<string, number> = {};
    for (const r of results) {
        if (r.op === "put" || r.op === "delete" || r.op === "check_version") out[r.key] = r.version;
    }
    return out;
}

// The spec's error codes are exactly these (fence/error.cpp); one more or one less fails.
const allCodes: Record<ErrorCode, true> = {
    invalid_token: true,
    invalid_name: true,
    invalid_request: true,
    unauthorized: true,
    forbidden: true,
    not_found: true,
    method_not_allowed: true,
    stale_token: true,
    lock_mismatch: true,
    idempotency_in_progress: true,
    precondition_failed: true,
    body_too_large: true,
    operation_failed: true,
    idempotency_key_reused: true,
    missing_token: true,
    too_many_idempotency_records: true,
    headers_too_large: true,
    internal: true,
    unavailable: true,
    outcome_unknown: true,
};
export const errorCodes = Object.keys(allCodes) as ErrorCode[];

// --- what the types must refuse ---------------------------------------------------------

// @ts-expect-error: not an error code
export const notACode: ErrorCode = "stale";

// @ts-expect-error: an op kind the server does not know
export const badKind: TxnOp = { op: "append", key: "k", body: "x" };

// @ts-expect-error: a field the op does not take (additionalProperties: false)
export const extraField: TxnOp = { op: "fence", lock: "l", token: 1, key: "k" };

// @ts-expect-error: a put result always has a version
export const noVersion: PutResult = { key: "k", lock: "k", token: 1 };

// @ts-expect-error: If-None-Match takes only "*"
export const badIfNoneMatch: PutHeaders = { "Fencing-Token": 1, "If-None-Match": "\"3\"" };

// @ts-expect-error: a write needs its Fencing-Token
export const noToken: PutHeaders = { "Fencing-Lock": "l" };

// @ts-check
// Binary payloads: the arrays Python sends as raw bytes with a dtype and shape (widgets/_kit.py array_payload).

const TYPES = { float32: Float32Array, int32: Int32Array, uint8: Uint8Array };

/**
 * Turn a binary payload {view: DataView, dtype, shape} into a typed array: a Float32Array, Int32Array or
 * Uint8Array by dtype, or null for no payload. Typed `any`: a caller casts it to the array it expects (the
 * trait's dtype is known there, not here).
 * @param {ArrayPayload | null | undefined} payload
 * @returns {any}
 */
export function ilabDecode(payload) {
  if (!payload || !payload.view) return null;
  const T = TYPES[payload.dtype];
  let view = payload.view;
  if (!(view instanceof DataView)) {
    // Static HTML managers may hand over an ArrayBuffer or typed array.
    view = ArrayBuffer.isView(view)
      ? new DataView(/** @type {ArrayBuffer} */ (view.buffer), view.byteOffset, view.byteLength)
      : new DataView(view);
  }
  const buffer = /** @type {ArrayBuffer} */ (view.buffer);
  if (view.byteOffset % T.BYTES_PER_ELEMENT === 0) {
    return new T(buffer, view.byteOffset, view.byteLength / T.BYTES_PER_ELEMENT);
  }
  return new T(buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
}

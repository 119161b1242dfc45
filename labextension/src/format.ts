/** Display helpers shared by the sidebar tables. */

export const DASH = '—';

/** Expected queue wait: `0.0 s`, `1.2 min`, `2.5 h`. */
export function formatWait(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return DASH;
  }
  if (seconds < 60) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 3600) {
    return `${(seconds / 60).toFixed(1)} min`;
  }
  return `${(seconds / 3600).toFixed(1)} h`;
}

/** Calibration age, coarse on purpose: `40 s`, `12 min`, `3 h`, `412 d`. */
export function formatAge(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return DASH;
  }
  if (seconds < 60) {
    return `${Math.round(seconds)} s`;
  }
  if (seconds < 3600) {
    return `${Math.round(seconds / 60)} min`;
  }
  if (seconds < 2 * 86400) {
    return `${Math.round(seconds / 3600)} h`;
  }
  return `${Math.round(seconds / 86400)} d`;
}

/** Job completion time, always in seconds (`12.3 s`); dash while running. */
export function formatJct(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return DASH;
  }
  return `${seconds.toFixed(1)} s`;
}

/** Workflow ids are `wf-` plus 8 hex digits; longer ids are cut. */
export function shortId(id: string): string {
  return id.length > 12 ? `${id.slice(0, 11)}…` : id;
}

/** Epoch seconds to local wall-clock time. */
export function formatTime(epochSeconds: number | null | undefined): string {
  if (epochSeconds === null || epochSeconds === undefined) {
    return DASH;
  }
  return new Date(epochSeconds * 1000).toLocaleTimeString();
}

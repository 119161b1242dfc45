import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { WorkflowState } from './schema';

/** URL namespace of the Python server extension's REST handlers. */
const API_NAMESPACE = 'qonductor/api';

/** States in which a workflow can still be cancelled. */
export const CANCELLABLE_STATES: ReadonlySet<WorkflowState> = new Set([
  'submitted',
  'running'
]);

/** States after which a workflow (and its step details) no longer change. */
export const FINAL_STATES: ReadonlySet<WorkflowState> = new Set([
  'done',
  'failed',
  'cancelled'
]);

/**
 * Call the qonductor REST API and parse its JSON reply.
 *
 * Throws an Error whose message is the server's `message` field on non-2xx
 * replies, so the UI can show it verbatim (e.g. "orchestrator unavailable").
 */
export async function requestAPI<T>(
  endpoint = '',
  init: RequestInit = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  // Join only the path part: URLExt.join normalises paths and is not meant
  // to see query strings.
  const q = endpoint.indexOf('?');
  const path = q < 0 ? endpoint : endpoint.slice(0, q);
  const query = q < 0 ? '' : endpoint.slice(q);
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, path) + query;

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }

  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }

  if (!response.ok) {
    const message =
      data && typeof data.message === 'string'
        ? data.message
        : `${response.status} ${response.statusText}`.trim();
    throw new ServerConnection.ResponseError(response, message);
  }
  return data as T;
}

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** URL namespace of the Python server extension's REST handlers. */
const API_NAMESPACE = 'qonductor/api';

export type WorkflowState =
  | 'submitted'
  | 'running'
  | 'done'
  | 'failed'
  | 'cancelled';

/** States in which a workflow can still be cancelled. */
export const CANCELLABLE_STATES: ReadonlySet<string> = new Set([
  'submitted',
  'running'
]);

/** States after which a workflow (and its step details) no longer change. */
export const FINAL_STATES: ReadonlySet<string> = new Set([
  'done',
  'failed',
  'cancelled'
]);

/** One QPU of `GET fleet`. */
export interface IDevice {
  name: string;
  family: string;
  num_qubits: number;
  online: boolean;
  queue_length: number;
  expected_wait_s: number;
  calibrated_at: number | null;
  calibration_age_s: number | null;
  running: string | null;
}

export interface IFleetReply {
  devices: IDevice[];
  updated_at: number;
}

/** One row of `GET workflows`. */
export interface IWorkflowSummary {
  id: string;
  name: string | null;
  state: WorkflowState;
  created_at: number;
  finished_at: number | null;
  jct_s: number | null;
  qpus: string[];
  jobs_running: number;
  jobs_queued: number;
  error: string | null;
}

export interface IWorkflowsReply {
  workflows: IWorkflowSummary[];
  running_jobs: number;
  queued_jobs: number;
}

/** Fields are optional because the step schema may grow on the Python side. */
export interface IQpuJob {
  id: string;
  qpu?: string | null;
  state?: string;
  queue_position?: number;
  est_start_s?: number;
}

export interface IStep {
  id: number | string;
  kind?: string;
  state?: string;
  qpu_jobs?: IQpuJob[];
}

/** `GET workflows/<id>`. */
export interface IWorkflowDetail {
  workflow_id: string;
  state: string;
  error: string | null;
  steps: IStep[];
  info?: {
    name?: string | null;
    created_at?: number | null;
    finished_at?: number | null;
  };
}

export interface ICancelReply {
  workflow_id: string;
  state: string;
  cancelled: string[];
}

export interface IEventsReply {
  seq: number;
  /** Whether an orchestrator runs; the events endpoint never starts one. */
  orchestrator?: boolean;
}

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

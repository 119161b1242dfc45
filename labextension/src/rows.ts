// Table rows of the sidebar, built from the REST replies' data.
import { CANCELLABLE_STATES } from './api';
import { h } from './dom';
import { DASH, formatAge, formatJct, formatWait, shortId } from './format';
import { IFleetDevice } from './model';
import {
  JobStatus,
  StepStatus,
  WorkflowDetail,
  WorkflowSummary
} from './schema';

/** Cached step details of an expanded workflow row, or why they failed. */
export type Detail = { detail: WorkflowDetail } | { failure: string };

export function table(headers: string[], body: HTMLTableSectionElement): HTMLElement {
  return h(
    'table',
    { class: 'jp-Qonductor-table' },
    h('thead', {}, h('tr', {}, ...headers.map(text => h('th', {}, text)))),
    body
  );
}

export function emptyRow(span: number, text: string): HTMLTableRowElement {
  return h(
    'tr',
    { class: 'jp-Qonductor-empty' },
    h('td', { colspan: String(span) }, text)
  );
}

export function fleetRow(device: IFleetDevice): HTMLTableRowElement {
  const name = h('td', { class: 'jp-Qonductor-name' }, device.name);
  if (!device.online) {
    name.append(' ', h('span', { class: 'jp-Qonductor-offline' }, 'offline'));
  }
  const row = h(
    'tr',
    {
      class: 'jp-Qonductor-qpu' + (device.online ? '' : ' jp-mod-offline'),
      'data-qpu': device.name,
      'data-online': String(device.online),
      title: device.running ? `Running ${device.running}` : ''
    },
    name,
    h('td', {}, device.family),
    h('td', { class: 'jp-Qonductor-num' }, String(device.num_qubits)),
    h('td', { class: 'jp-Qonductor-num' }, String(device.queue_length)),
    h('td', { class: 'jp-Qonductor-num' }, formatWait(device.expected_wait_s)),
    h('td', { class: 'jp-Qonductor-num' }, formatAge(device.calibration_age_s))
  );
  return row;
}

export function workflowRow(
  wf: WorkflowSummary,
  expanded: boolean
): HTMLTableRowElement {
  const actions = h('td', { class: 'jp-Qonductor-actions' });
  if (CANCELLABLE_STATES.has(wf.state)) {
    actions.append(
      h(
        'button',
        { class: 'jp-Qonductor-cancel jp-Button', title: `Cancel ${wf.id}` },
        'Cancel'
      )
    );
  }
  return h(
    'tr',
    {
      class: 'jp-Qonductor-workflow' + (expanded ? ' jp-mod-expanded' : ''),
      'data-workflow-id': wf.id,
      'data-state': wf.state,
      title: wf.error ? `${wf.id}: ${wf.error}` : wf.id,
      'aria-expanded': String(expanded)
    },
    h('td', { class: 'jp-Qonductor-id' }, shortId(wf.id)),
    h('td', {}, wf.name ?? DASH),
    h(
      'td',
      {},
      h(
        'span',
        { class: `jp-Qonductor-state jp-Qonductor-state-${wf.state}` },
        wf.state
      )
    ),
    h('td', {}, wf.qpus.length ? wf.qpus.join(', ') : DASH),
    h('td', { class: 'jp-Qonductor-num' }, formatJct(wf.jct_s)),
    actions
  );
}

export function detailRow(
  id: string,
  detail: Detail | undefined
): HTMLTableRowElement {
  const cell = h('td', { colspan: '6' });
  if (!detail) {
    cell.append('Loading…');
  } else if ('failure' in detail) {
    cell.append(errorLine(detail.failure));
  } else {
    const wf = detail.detail;
    if (wf.error) {
      cell.append(errorLine(wf.error));
    }
    cell.append(
      wf.steps.length
        ? h('ol', { class: 'jp-Qonductor-steps' }, ...wf.steps.map(stepItem))
        : 'No steps'
    );
  }
  return h(
    'tr',
    { class: 'jp-Qonductor-detail', 'data-detail-for': id },
    cell
  );
}

/** Distinct from the header's `.jp-Qonductor-error` so tests find one. */
function errorLine(text: string): HTMLElement {
  return h('div', { class: 'jp-Qonductor-detail-error' }, text);
}

function stepItem(step: StepStatus): HTMLLIElement {
  return h(
    'li',
    { class: 'jp-Qonductor-step', 'data-step-id': step.id },
    `#${step.id} ${step.kind} `,
    h(
      'span',
      { class: `jp-Qonductor-state jp-Qonductor-state-${step.state}` },
      step.state
    ),
    ...step.qpu_jobs.map(job =>
      h('div', { class: 'jp-Qonductor-job' }, describeJob(job))
    )
  );
}

function describeJob(job: JobStatus): string {
  let text = `${job.id} on ${job.qpu ?? DASH}: ${job.state}`;
  const extra: string[] = [];
  if (job.queue_position !== null) {
    extra.push(`queue #${job.queue_position}`);
  }
  if (job.est_start_s !== null) {
    extra.push(`starts in ~${formatWait(job.est_start_s)}`);
  }
  if (extra.length) {
    text += ` (${extra.join(', ')})`;
  }
  return text;
}

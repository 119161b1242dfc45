import { Widget } from '@lumino/widgets';

import { QonductorModel } from './model';

/** Status-bar text such as `Qonductor: 2 running · 3 queued`. */
export class QonductorStatus extends Widget {
  constructor(model: QonductorModel, onClick: () => void) {
    super();
    this._model = model;
    this.addClass('jp-Qonductor-status');
    this.node.addEventListener('click', onClick);
    model.changed.connect(this._update, this);
    this._update();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._update, this);
    super.dispose();
  }

  private _update(): void {
    const { runningJobs, queuedJobs, error, orchestratorRunning } = this._model;
    if (orchestratorRunning === false) {
      this.node.textContent = 'Qonductor: not running';
      this.toggleClass('jp-mod-error', false);
      this.node.title =
        'No orchestrator runs; it starts with the first %%qonductor cell or when the sidebar opens';
      return;
    }
    let text = `Qonductor: ${runningJobs} running`;
    if (queuedJobs > 0) {
      text += ` · ${queuedJobs} queued`;
    }
    this.node.textContent = text;
    // Keep the counts visible but flag that they may be stale.
    this.toggleClass('jp-mod-error', error !== null);
    this.node.title = error
      ? `Qonductor: ${error}`
      : 'Show the Qonductor sidebar';
  }

  private _model: QonductorModel;
}

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';

import { qonductorIcon } from './icon';
import { QonductorModel } from './model';
import { QonductorSidebar, SIDEBAR_ID } from './sidebar';
import { QonductorStatus } from './statusbar';

const OPEN_COMMAND = 'qonductor:open-sidebar';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'qonductor-jupyter:plugin',
  description: 'Qonductor fleet/workflow sidebar and status-bar summary.',
  autoStart: true,
  optional: [ICommandPalette, IStatusBar, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null
  ) => {
    // One model, hence one long-poll, for both the sidebar and status bar.
    const model = new QonductorModel();
    const sidebar = new QonductorSidebar(model);
    app.shell.add(sidebar, 'left', { rank: 300 });
    restorer?.add(sidebar, SIDEBAR_ID);

    app.commands.addCommand(OPEN_COMMAND, {
      label: 'Show Qonductor Sidebar',
      icon: qonductorIcon,
      execute: () => app.shell.activateById(SIDEBAR_ID)
    });
    palette?.addItem({ command: OPEN_COMMAND, category: 'Qonductor' });

    if (statusBar) {
      const status = new QonductorStatus(model, () => {
        void app.commands.execute(OPEN_COMMAND);
      });
      statusBar.registerStatusItem('qonductor-jupyter:status', {
        item: status,
        align: 'left'
      });
    }

    model.start();
  }
};

export default plugin;

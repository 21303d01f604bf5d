"""One plugin concept (issue 33): the guard and the watch are two instances of
:class:`patchkit.plugin_results.Plugin`, with one report type whose ``--json`` each plugin lays out.

Offline: these read patchkit's own modules; tests/test_guard.py and tests/test_watch.py run both
plugins on real release trees.
"""

from __future__ import annotations

import json

import pytest

from patchkit import api
from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import ExitCode
from patchkit.plugin_results import LAYOUT, PluginAction, PluginReport
from patchkit.store.plugin_dist import Plugin
from patchkit.results import ApplyReport, InstallInfo, RevertReport, StatusReport
from patchkit.vllm.release import contract


def test_the_guard_and_the_watch_are_the_plugins_api_iterates():
    names = [plugin.NAME for plugin in api.PLUGINS]
    assert names == ["guard", "watch"]
    for plugin in api.PLUGINS:
        assert isinstance(plugin, Plugin), plugin.__name__
        assert api.plugin_named(plugin.NAME) is plugin
        # the entry-point group is the distribution's, and its first release is one contract.py names
        assert [group for group, _ in plugin.DIST.entry_points] == [plugin.GROUP]
        releases = {v for k, v in vars(contract).items() if k.endswith(("_FROM", "_FIRST"))}
        assert plugin.FIRST_RELEASE in releases
        assert set(LAYOUT) <= set(plugin.LAYOUT) and len(set(plugin.LAYOUT)) == len(plugin.LAYOUT)
    assert api.PLUGINS[0].FIRST_RELEASE == contract.GENERAL_PLUGINS_FROM
    assert api.PLUGINS[1].FIRST_RELEASE == contract.STAT_LOGGER_PLUGINS_FROM


@pytest.mark.parametrize("plugin", api.PLUGINS, ids=lambda p: p.NAME)
def test_a_plugins_report_has_its_layout_alone_and_nested(plugin):
    """One report type: ``--json`` has exactly the plugin's keys in its order, whether the report stands
    alone (``<plugin> install``) or nested in apply, revert and status (a report rendered field by
    field would show ``plugin``, ``details`` and ``layout`` there)."""
    report = plugin.report(PluginAction.SHOWN, True, files=("a.py",), problems=("p",), install_command="x")
    alone = report.to_dict()
    assert list(alone) == list(plugin.LAYOUT)
    assert alone["files"] == ["a.py"] and alone["problems"] == ["p"] and alone["action"] == "shown"
    info = InstallInfo("/sp", "0.17.1", "A1", "SupportsEagle3 Protocol", patchable=True)
    for outer in (
        ApplyReport(info, False, [], (), True, **{plugin.NAME: report}),
        RevertReport(info, (), False, **{plugin.NAME: report}),
        StatusReport(info, [], **{plugin.NAME: report}),
    ):
        assert outer.to_dict()[plugin.NAME] == alone
    assert json.loads(json.dumps(alone)) == alone


def test_a_report_reads_its_details_as_attributes_and_refuses_others():
    guard = api.plugin_named("guard").report(PluginAction.REMOVED, False, watched=("v.py",))
    watch = api.plugin_named("watch").report(PluginAction.SHOWN, True, drafts=7, threshold=0.5)
    assert guard.watched == ("v.py",) and guard.architectures == ()
    assert (watch.drafts, watch.threshold, watch.missing) == (7, 0.5, None)
    assert type(guard) is type(watch) is PluginReport
    with pytest.raises(AttributeError):
        guard.drafts  # noqa: B018 - the watch's detail, not the guard's
    with pytest.raises(Exception):
        guard.action = PluginAction.SHOWN  # frozen


def test_refused_actions_exit_3_and_the_rest_0():
    step = NextStep(patchkit_argv("apply", target="vllm", guard=True), "patches and guards")
    for plugin in api.PLUGINS:
        for action in PluginAction:
            report = plugin.report(action, False, next_steps=(step,))
            expected = (
                ExitCode.REFUSED
                if action in (PluginAction.NOTHING_TO_GUARD, PluginAction.NO_PLUGIN_GROUP)
                else ExitCode.OK
            )
            assert report.exit_code is expected, (plugin.NAME, action)

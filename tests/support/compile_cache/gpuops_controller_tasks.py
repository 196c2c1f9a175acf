"""Tasks that ansible-playbook can finish without forking a worker (issue 49), armed by this directory's
sitecustomize.py where the compile cache is on (``GPUOPS_TEST_COMPILE_CACHE``): a task that its ``when`` skips, and a
task of ansible-core's own controller-side actions (``HERE``). ``GPUOPS_TEST_CONTROLLER_TASKS``: unset, every one of
them; ``skip``, the skips only; ``off``, none (ansible-core's strategies left alone), as while ``GPUOPS_TEST_TASK_CPU``
reads the CPU of every worker (gpuops_task_cpu.py).

Why: ansible-core forks a worker for every task on every host. In a lab converge from scratch 95 of the 201 workers
only evaluated their task's ``when`` and sent back a skip, and 72 more ran an action that never leaves the controller
(set_fact, debug, assert, the includes, the roles' argument checks); 34 ran a module on a node. On the slow machine
kind most of a worker's cost is the kernel's copy-on-write of the parent's pages that the child touches.

How: ``StrategyBase._queue_task`` (every strategy queues a task through it) is wrapped, for ansible-core 2.19 (whose
internals this follows: ``INTERNALS``; every other version's strategies are left alone).

- A task of ``HERE`` (named by its ``ansible.builtin`` name, which no playbook-adjacent plugin can shadow) runs in
  ansible-playbook through the worker's own code: ansible-core's ``TaskExecutor`` on a copy of the task (the worker
  mutates its task, a fork's copy) with a copy of the task's variables, inside the worker's ``TaskContext``, and its
  result goes through the same queue, after the same ``v2_runner_on_start``, as a worker's. Not with ``async``,
  ``timeout`` (an alarm signal in the worker) or ``until`` (a sleep between retries).
- Another task with a ``when`` gets, in ansible-playbook, the steps the worker's TaskExecutor takes before it evaluates
  the conditional (``__init__``'s squash, ``_calculate_delegate_to``, the start of ``_execute_internal``: the play
  context's variables), then the task's ``_resolve_conditional``; where that is false, the worker's result for a skip
  (``changed``, ``skipped``, ``skip_reason``, ``false_condition``, ``_ansible_no_log``) goes through the same queue. A
  loop (its ``when`` is per item), a true conditional, one that fails or warns, go to a worker as before.
"""
import sys

INTERNALS = "2.19."   # the ansible-core whose TaskExecutor this follows (the main version, requirements-lab.txt)
SKIP_REASON = "Conditional result was False"
# ansible-core's actions that never leave the controller nor change the process that runs them
HERE = frozenset("ansible.builtin." + name for name in (
    "set_fact", "debug", "assert", "fail", "include_tasks", "include_role", "validate_argument_spec"))


class ControllerTasks(object):
    """Wraps ``strategy_base._queue_task``; ``skipped`` and ``ran`` count the tasks this process finished without a
    worker (``run_here``: False for the skips only)."""

    def __init__(self, strategy_base, run_here=True):
        # ansible-core's own pieces, as its WorkerProcess and TaskExecutor import them
        from ansible.errors import AnsibleError   # pylint: disable=import-outside-toplevel
        from ansible.executor.task_executor import TaskExecutor   # pylint: disable=import-outside-toplevel
        from ansible.executor.task_result import _RawTaskResult   # pylint: disable=import-outside-toplevel
        from ansible.plugins import loader   # pylint: disable=import-outside-toplevel
        from ansible._internal import _display_utils, _task   # pylint: disable=import-outside-toplevel
        from ansible._internal._errors import _error_utils   # pylint: disable=import-outside-toplevel
        from ansible._internal._templating._engine import TemplateEngine   # pylint: disable=import-outside-toplevel
        self.error = AnsibleError
        self.error_result = _error_utils.result_dict_from_exception
        self.executor = TaskExecutor
        self.raw_result = _RawTaskResult
        self.loaders = loader.get_plugin_loader_namespace
        self.warnings = _display_utils.DeferredWarningContext
        self.task_context = _task.TaskContext
        self.engine = TemplateEngine
        self.run_here = run_here
        self.skipped = 0
        self.ran = 0
        real = strategy_base._queue_task
        decide = self

        def _queue_task(strategy, host, task, task_vars, play_context):
            if decide.finish(strategy, host, task, task_vars, play_context):
                return None
            return real(strategy, host, task, task_vars, play_context)

        _queue_task.__wrapped__ = real
        strategy_base._queue_task = _queue_task

    def runs_here(self, task):
        """Whether ``task`` runs in this process (``HERE``, without async, timeout or until)."""
        return (self.run_here and task.action in HERE and not task.async_val and not task.timeout
                and not task.until)

    def skip_result(self, strategy, host, task, task_vars, play_context):
        """(the squashed copy, the worker's result) for ``task`` on ``host`` where its conditional is false, else None."""
        if not task.when or task.loop is not None or task.loop_with:
            return None
        squashed = task.copy(exclude_tasks=True)
        squashed.squash()
        variables = dict(task_vars)
        templar = self.engine(loader=strategy._loader, variables=variables)
        delegated_vars, delegated_host = strategy._variable_manager.get_delegated_vars_and_hostname(
            templar, squashed, variables)
        squashed.delegate_to = delegated_host
        variables.update(delegated_vars)
        tempvars = variables.copy()
        try:
            context = play_context.set_task_and_variable_override(task=squashed, variables=variables, templar=templar)
            context.post_validate(templar=templar)
            if not context.remote_addr:
                context.remote_addr = host.address
            context.update_vars(tempvars)
        except self.error:
            pass   # the worker keeps this error for a task that runs; a skipped one never raises it
        found = {}
        with self.warnings(variables=variables) as captured:
            if squashed._resolve_conditional(squashed.when, tempvars, result_context=found):
                return None
            if captured.get_warnings() or captured.get_deprecation_warnings():
                return None
        result = dict(changed=False, skipped=True, skip_reason=SKIP_REASON)
        result.update(found)
        squashed.update_result_no_log(templar, result)
        return squashed, result

    def finish(self, strategy, host, task, task_vars, play_context):
        """Finishes ``task`` on ``host`` here where it can (True), or leaves it to a worker (False)."""
        try:
            if self.runs_here(task):
                copy = task.copy(exclude_tasks=True)
                executor = self.executor(host, copy, dict(task_vars), play_context, strategy._loader, self.loaders(),
                                         strategy._final_q, strategy._variable_manager)
                decided = None
            else:
                executor = None
                decided = self.skip_result(strategy, host, task, task_vars, play_context)
                if decided is None:
                    return False
        except Exception:   # pylint: disable=broad-except
            return False   # a worker does it again and reports what is wrong
        strategy._queued_task_cache[(host.name, task._uuid)] = {
            'host': host, 'task': task, 'task_vars': task_vars, 'play_context': play_context}
        strategy._tqm.send_callback('v2_runner_on_start', host, task)
        if executor is not None:
            # (2.19's TaskContext takes the task alone; pylint on a later ansible-core reads that version's signature)
            with self.task_context(copy):   # pylint: disable=missing-kwoa
                result = executor.run()   # (catches what the task raises, as in a worker)
            self.ran += 1
        else:
            copy, result = decided
            self.skipped += 1
        try:
            strategy._final_q.send_task_result(self.raw_result(host=host, task=copy, return_data=result,
                                                               task_fields=copy.dump_attrs()))
        except Exception as ex:   # pylint: disable=broad-except
            # as the worker does when its result cannot be sent (WorkerProcess._run)
            try:
                raise self.error("Task result omitted due to queue send failure.") from ex
            except Exception as wrapper:   # pylint: disable=broad-except
                strategy._final_q.send_task_result(self.raw_result(
                    host=host, task=copy, return_data=self.error_result(wrapper), task_fields={}))
        strategy._pending_results += 1
        return True


def install(strategy_module, mode=""):
    """Wraps the strategies' ``_queue_task`` in ansible-core 2.19 (returns the ControllerTasks; ``mode`` ``skip``: the
    skips only); None elsewhere, where already wrapped, and for ``off``."""
    from ansible.release import __version__   # pylint: disable=import-outside-toplevel
    if not __version__.startswith(INTERNALS) or mode.lower() == "off":
        return None
    base = strategy_module.StrategyBase
    if getattr(base._queue_task, "__wrapped__", None) is not None:
        return None
    return ControllerTasks(base, run_here=mode.lower() != "skip")


if __name__ == "__main__":   # pragma: no cover
    sys.exit("imported by sitecustomize.py")

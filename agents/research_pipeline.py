"""ResearchPipelineAgent: a long-running research pipeline in three phases, with an approval.

Modelled on DeerFlow's planner → research team → reporter flow, over durable steps
(docs/long-running.md):

1. **preparation**: the planner (a model call) splits the topic into sub-questions, and the
   task's sources are indexed;
2. **execution**: one parallel branch per sub-question (``ctx.gather``): search the sources,
   analyse the hits (a model call), condense the analysis (a model call); then a draft
   report (a model call);
3. a person **approves** the draft (``ctx.ask`` with the ``Approval`` schema). While the
   question is open the task holds no worker slot. Feedback without approval gets the draft
   revised (a model call) and asked again, ``max_revisions`` times at most;
4. **finalization**, once approved: an executive summary (a model call) and the references.

Every model call and every retrieval is a step: a worker crash or a redeploy resumes the task
at its last completed step, and the steps already recorded never run again (nor are paid
for again). Each step's tokens and cost are in its ``step_completed`` audit event; the task's
totals, over all its deliveries, are in the result's metrics. The code between steps only
builds prompts and reads recorded results, so it runs the same on every delivery.

The model is the one named ``research`` under ``models:`` (the demo points it at the model
SIMULATOR). With no model available a step answers an extractive placeholder, ``degraded``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents import pipeline_text as pt
from deepagents import AgentContract, Result, TaskContext
from deepagents.contract.result import ResultMetrics
from deepagents.contract.task import Task
from deepagents.modelcall import ModelCalls, current_model_calls, wrap_model_call

MODEL = "research"
STATE_MAJOR = "1"  # checkpoints of another major version are refused (migrate_state)


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1, max_length=200)
    text: str = Field(max_length=20_000)


Question = Annotated[str, Field(min_length=1, max_length=500)]


class PipelineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1, max_length=200)
    sources: list[Source] = Field(default_factory=list, max_length=32)
    questions: list[Question] = Field(
        default_factory=list, max_length=8, description="the lanes' own questions, first"
    )
    lanes: int = Field(default=4, ge=1, le=8)
    max_revisions: int = Field(default=1, ge=0, le=3)
    approval_timeout_s: float = Field(default=86_400, gt=0, le=30 * 86_400)
    on_timeout: Literal["fail", "default", "escalate"] = Field(
        default="fail", description='"default": an unanswered approval counts as a rejection'
    )


class Approval(BaseModel):
    """The reviewer's answer (``deepagents reply TASK --answer '{"approved": true}'``)."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    feedback: str = Field(default="", max_length=2000, description="what to change, if not")
    reviewer: str = Field(default="", max_length=100)


NO_REPLY = Approval(approved=False, reviewer="nobody (the approval timed out)")


class PipelineState(BaseModel):
    """The pipeline's checkpointed progress. Assigned from step results, never accumulated,
    so re-running the code between steps on a later delivery writes the same values."""

    phase: str = "preparation"
    plan: list[str] = Field(default_factory=list)
    findings: list[dict[str, Any]] = Field(default_factory=list)
    drafts: int = 0
    reviews: list[dict[str, Any]] = Field(default_factory=list)


class ResearchPipelineAgent(AgentContract):
    name = "research_pipeline"
    version = "1.0.0"
    intents = ("research_pipeline",)
    input_model = PipelineRequest
    state_model: ClassVar[type[BaseModel] | None] = PipelineState
    model = MODEL

    def __init__(self, model_calls: ModelCalls | None = None) -> None:
        self._calls = model_calls

    async def execute(self, context: dict[str, Any]) -> Result:
        request = PipelineRequest.model_validate(context["payload"])
        ctx: TaskContext = context["ctx"]
        task: Task = context["task"]
        state: PipelineState = ctx.state
        calls: list[dict[str, Any]] = []  # every model step's recorded answer
        with ctx.phase("preparation"):
            plan, index = await self._prepare(ctx, task, request, calls)
        state.phase, state.plan = "execution", plan
        await ctx.checkpoint()
        with ctx.phase("execution"):
            findings = await ctx.gather(
                *(self._branch(ctx, task, request, q, index, calls) for q in plan)
            )
            draft = await self._model(
                ctx, task, "draft", pt.draft_messages(request.topic, findings), calls
            )
        state.findings, state.drafts, state.phase = [_lean(f) for f in findings], 1, "review"
        await ctx.checkpoint()
        approval, draft = await self._review(ctx, task, request, draft, calls)
        if not approval.approved:
            return self._result(request, state, draft, calls, summary=None, refs=[])
        with ctx.phase("finalization"):
            summary = await self._model(
                ctx, task, "summary", pt.summary_messages(request.topic, draft), calls
            )
            refs = await ctx.step("references", pt.references, findings)
        state.phase = "done"
        await ctx.checkpoint()
        return self._result(request, state, draft, calls, summary=summary, refs=refs)

    # phases ----------------------------------------------------------------------------------

    async def _prepare(
        self, ctx: TaskContext, task: Task, request: PipelineRequest, calls: list[dict[str, Any]]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        answer = await self._model(
            ctx, task, "plan", pt.plan_messages(request.topic, request.lanes), calls
        )
        sources = [s.model_dump() for s in request.sources]
        index = await ctx.step("index", pt.index_sources, sources)
        return pt.plan_questions(request.topic, answer, request.lanes, request.questions), index

    async def _branch(
        self,
        ctx: TaskContext,
        task: Task,
        request: PipelineRequest,
        question: str,
        index: list[dict[str, Any]],
        calls: list[dict[str, Any]],
    ) -> dict[str, Any]:
        sources = [s.model_dump() for s in request.sources]
        hits = await ctx.step("search", pt.search, question, index, sources)
        analysis = await self._model(
            ctx, task, "analyse", pt.analyse_messages(request.topic, question, hits), calls
        )
        summary = await self._model(
            ctx, task, "condense", pt.condense_messages(question, analysis), calls
        )
        return {"question": question, "sources": hits, "analysis": analysis, "summary": summary}

    async def _review(
        self,
        ctx: TaskContext,
        task: Task,
        request: PipelineRequest,
        draft: str,
        calls: list[dict[str, Any]],
    ) -> tuple[Approval, str]:
        """Ask for approval; revise on feedback and ask again, up to ``max_revisions``."""
        state: PipelineState = ctx.state
        for round_ in range(request.max_revisions + 1):
            approval = await ctx.ask(
                _question(request.topic, draft, round_),
                schema=Approval,
                timeout_s=request.approval_timeout_s,
                on_timeout=request.on_timeout,
                default=NO_REPLY if request.on_timeout == "default" else None,
            )
            state.reviews = [*state.reviews[:round_], approval.model_dump()]
            if approval.approved or not approval.feedback or round_ == request.max_revisions:
                return approval, draft
            with ctx.phase("execution"):
                messages = pt.revise_messages(draft, approval.feedback)
                draft = await self._model(ctx, task, "revise", messages, calls)
            state.drafts = round_ + 2
            await ctx.checkpoint()
        raise AssertionError("unreachable: the last round returns")

    # steps -----------------------------------------------------------------------------------

    async def _model(
        self,
        ctx: TaskContext,
        task: Task,
        step: str,
        messages: list[dict[str, str]],
        calls: list[dict[str, Any]],
    ) -> str:
        """A model call as a durable step; its recorded answer (with its usage) is kept in
        ``calls`` for the task's totals, whichever delivery made it."""
        answer: dict[str, Any] = await ctx.step(step, self.call_model, task, messages)
        calls.append(answer)
        return str(answer["text"])

    async def call_model(self, task: Task, messages: list[dict[str, str]]) -> dict[str, Any]:
        """One model call and its usage, as JSON (the step's recorded result)."""
        calls = self._calls or current_model_calls()
        fallback = pt.offline_text(*(m["content"] for m in messages[1:]))
        if calls is None or self.model not in calls.models:
            return {"text": fallback, "model": None, "tokens": 0, "cost_usd": 0.0, "degraded": True}
        reply = await wrap_model_call(
            self.model,
            messages,
            calls=calls,
            task=task,
            agent=self.name,
            max_tokens=256,
            fallback=lambda _info: fallback,
        )
        return {
            "text": reply.text,
            "model": reply.model,
            "tokens": reply.tokens_used,
            "cost_usd": reply.cost_usd,
            "degraded": reply.degraded,
        }

    # upgrades --------------------------------------------------------------------------------

    def migrate_state(self, from_version: str, state: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint of another 1.x version is read as it is (fields it lacks take their
        defaults); one of another major version is refused, and the task is dead-lettered
        ``state_incompatible`` rather than resumed on a state it cannot read."""
        if from_version.split(".", 1)[0] != STATE_MAJOR:
            raise ValueError(f"no migration from version {from_version} to {self.version}")
        return state

    # result ----------------------------------------------------------------------------------

    def _result(
        self,
        request: PipelineRequest,
        state: PipelineState,
        draft: str,
        calls: list[dict[str, Any]],
        *,
        summary: str | None,
        refs: list[dict[str, Any]],
    ) -> Result:
        tokens = sum(int(c["tokens"]) for c in calls)
        cost = round(sum(float(c["cost_usd"]) for c in calls), 6)
        output = {
            "topic": request.topic,
            "approved": summary is not None,
            "report": draft,
            "summary": summary,
            "plan": state.plan,
            "findings": state.findings,
            "references": refs,
            "reviews": state.reviews,
            "model_calls": len(calls),
        }
        # Totals over every delivery: a resumed delivery's own usage holds only the steps it ran.
        metrics = ResultMetrics(tokens_used=tokens, cost_usd=cost, model_calls=len(calls))
        degraded = any(c["degraded"] for c in calls)
        return Result(output=output, metrics=metrics, degraded=degraded)


def _lean(finding: dict[str, Any]) -> dict[str, Any]:
    """What the checkpoint keeps of a branch's finding (its full text is in its step records)."""
    sources = [hit["id"] for hit in finding["sources"]]
    return {"question": finding["question"], "summary": finding["summary"], "sources": sources}


def _question(topic: str, draft: str, round_: int) -> str:
    again = f" (revision {round_})" if round_ else ""
    excerpt = draft if len(draft) <= 400 else draft[:400] + "…"
    return f"Approve the research report on {topic!r} for publication{again}? Draft: {excerpt}"

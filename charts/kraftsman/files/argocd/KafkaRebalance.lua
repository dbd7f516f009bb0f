-- Argo CD health of a kraftsman.io KafkaRebalance: Progressing while the planner runs and while
-- the approved proposal executes; Suspended while a proposal waits for approval (or was
-- rejected); Healthy once executed; Degraded on an error, a stale proposal, or while the running
-- step's moves copy nothing (condition Stalled).
-- The prelude shared by every kraftsman health script, down to the Degraded check: Argo CD
-- scripts cannot import, so `kraftsman crds generate` writes each kind's health.lua from
-- operator/kraftsman/templates/argocd/prelude.lua and <Kind>.lua.j2. Edit those, not a copy.
local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function text(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kraftsman operator to pick this up"
  return hs
end
local gen = obj.metadata.generation
local seen = obj.status.observedGeneration
if gen ~= nil and (seen == nil or seen < gen) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. gen
  return hs
end
local degraded = condition("Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = degraded.reason .. ": " .. text(degraded, "")
  return hs
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = text(ready, "Ready")
  return hs
end
local phase = obj.status.phase
if phase == "ProposalReady" then
  hs.status = "Suspended"
  hs.message = text(condition("ProposalReady"), "Proposal ready") ..
    "; approve with spec.approval: Approved or the kraftsman.io/rebalance=approve annotation"
  return hs
end
if phase == "Rejected" then
  hs.status = "Suspended"
  hs.message = text(ready, "Rejected")
  return hs
end
local stalled = condition("Stalled")
if phase == "Rebalancing" and stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = "Stalled: " .. text(stalled, "the running step's moves copy nothing")
  return hs
end
hs.status = "Progressing"
hs.message = text(condition("Progressing"), phase or "Working")
if phase == "Rebalancing" and obj.status.progress ~= nil then
  hs.message = hs.message .. " (" .. obj.status.progress .. " reassignments completed)"
end
return hs

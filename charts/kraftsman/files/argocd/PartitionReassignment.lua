-- Argo CD health of a kraftsman.io PartitionReassignment (bounded operation: Progressing until Succeeded; Suspended while paused; Degraded while its moves copy nothing, condition Stalled).
-- A sync wave after it waits until it is Healthy, i.e. until the operation Succeeded.
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
local succeeded = condition("Succeeded")
if succeeded ~= nil and succeeded.status == "True" then
  hs.status = "Healthy"
  hs.message = text(succeeded, "Succeeded")
  return hs
end
if succeeded ~= nil and succeeded.status == "False" then
  hs.status = "Degraded"
  hs.message = succeeded.reason .. ": " .. text(succeeded, "failed")
  return hs
end
local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = "Stalled: " .. text(stalled, "moves in flight copy nothing")
  return hs
end
if obj.spec ~= nil and obj.spec.paused == true then
  hs.status = "Suspended"
  hs.message = "Paused: the moves in flight finish, no new ones start"
  return hs
end
local progressing = condition("Progressing")
hs.status = "Progressing"
hs.message = text(progressing, "Running")
if obj.status.progress ~= nil then
  hs.message = hs.message .. " (" .. obj.status.progress .. ")"
end
return hs

-- Argo CD health check for hints.kvrouter.io/RouterRollout (kv-hint-operator).
-- Healthy: Ready for the current generation (no candidate in flight, and
-- the last one was promoted, or none came yet). Degraded: Stalled, the last
-- candidate was rolled back (the message says which metric, the baseline
-- and canary figures) or another RouterRollout runs the router. Suspended:
-- Paused, by spec.paused or an Inconclusive analysis (the message says
-- why and how to resume). Progressing: a candidate moves through the steps
-- (Reconciling; the message names the step and the pods on it), or the
-- manager has not processed the current generation yet. Uses only Lua's
-- base library, which is all Argo CD opens for a health check.
local hs = {}
local generation = obj.metadata.generation or 0
if obj.status == nil or obj.status.observedGeneration == nil or obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kvhint manager to process generation " .. generation
  return hs
end
local ready = nil
local reconciling = nil
local paused = nil
for _, c in ipairs(obj.status.conditions or {}) do
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = (c.reason or "Stalled") .. ": " .. (c.message or "")
    return hs
  elseif c.type == "Paused" and c.status == "True" then
    paused = c
  elseif c.type == "Reconciling" and c.status == "True" then
    reconciling = c
  elseif c.type == "Ready" then
    ready = c
  end
end
if paused ~= nil then
  hs.status = "Suspended"
  hs.message = (paused.reason or "Paused") .. ": " .. (paused.message or "")
  return hs
end
if ready ~= nil and ready.status == "True" and ready.observedGeneration == generation then
  hs.status = "Healthy"
  hs.message = ready.message or "Ready"
  return hs
end
hs.status = "Progressing"
if reconciling ~= nil then
  hs.message = (reconciling.reason or "Reconciling") .. ": " .. (reconciling.message or "")
elseif ready ~= nil then
  hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
else
  hs.message = "Waiting for the Ready condition"
end
return hs

-- Argo CD health check for hints.kvrouter.io/HintPolicy (kv-hint-operator).
-- Healthy: Accepted for the current generation. Degraded: Stalled, the
-- type or parameters are rejected; the message is the reason and what to
-- fix. Progressing: the manager has not processed the current generation
-- yet. Uses only Lua's base library, which is all Argo CD opens for a
-- health check.
local hs = {}
local generation = obj.metadata.generation or 0
if obj.status == nil or obj.status.observedGeneration == nil or obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kvhint manager to process generation " .. generation
  return hs
end
local accepted = nil
for _, c in ipairs(obj.status.conditions or {}) do
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = (c.reason or "Stalled") .. ": " .. (c.message or "")
    return hs
  elseif c.type == "Accepted" then
    accepted = c
  end
end
if accepted ~= nil and accepted.status == "True" and accepted.observedGeneration == generation then
  hs.status = "Healthy"
  hs.message = accepted.message or "Accepted"
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the Accepted condition"
return hs

-- Argo CD health check for hints.kvrouter.io/RouterRole (kv-hint-operator).
-- Healthy: Ready for the current generation (the spec runs on every router
-- pod). Degraded: Stalled, the spec is rejected and waiting cannot fix it;
-- the message is the reason and what to fix. Progressing: the manager has
-- not processed the current generation yet, or it does not run on every
-- router pod yet (Reconciling). A hint policy that a router pod's sidecar
-- has ejected (PolicyEjected) leaves the role Healthy, as Ready does (the
-- spec runs everywhere; the sidecar keeps bookings fast without it), and
-- its message follows Ready's. Uses only Lua's base library, which is all
-- Argo CD opens for a health check.
local hs = {}
local generation = obj.metadata.generation or 0
if obj.status == nil or obj.status.observedGeneration == nil or obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kvhint manager to process generation " .. generation
  return hs
end
local ready = nil
local reconciling = nil
local ejected = nil
for _, c in ipairs(obj.status.conditions or {}) do
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = (c.reason or "Stalled") .. ": " .. (c.message or "")
    return hs
  elseif c.type == "Reconciling" and c.status == "True" then
    reconciling = c
  elseif c.type == "Ready" then
    ready = c
  elseif c.type == "PolicyEjected" and c.status == "True" then
    ejected = c
  end
end
if ready ~= nil and ready.status == "True" and ready.observedGeneration == generation then
  hs.status = "Healthy"
  hs.message = ready.message or "Ready"
  if ejected ~= nil then
    hs.message = hs.message .. "; PolicyEjected: " .. (ejected.message or "")
  end
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

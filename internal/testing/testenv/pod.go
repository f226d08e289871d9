package testenv

import (
	"context"
	"fmt"
	"strconv"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContainerEnv is container c's environment as the kubelet gives it, for
// suites that run a pod's container as a process of their own: values as
// written, the downward API's metadata.name, metadata.namespace and
// status.podIP (podIP), and a resourceFieldRef to limits.memory in bytes.
// Any other source is an error naming the variable.
func ContainerEnv(pod *corev1.Pod, c *corev1.Container, podIP string) ([]string, error) {
	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "status.podIP":
				v = podIP
			default:
				return nil, fmt.Errorf("env %s: field %s not resolved here", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			q := c.Resources.Limits[corev1.ResourceMemory]
			v = strconv.FormatInt(q.Value(), 10)
		default:
			return nil, fmt.Errorf("env %s: source %+v not resolved here", e.Name, e.ValueFrom)
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// WriteBoundKubeconfig writes to path a kubeconfig for cfg's API server
// with a token of the pod's ServiceAccount bound to the pod (TokenRequest
// with the pod as bound object): what a projected token volume gives the
// pod's containers, so that admission sees the pod the token belongs to.
func WriteBoundKubeconfig(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, pod *corev1.Pod, path string) error {
	exp := int64(3607)
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("TokenRequest for %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	return clientcmd.WriteToFile(*kc, path)
}

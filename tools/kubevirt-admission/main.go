// Command kubevirt-admission serves KubeVirt's own validating admitters (kubevirt.io/kubevirt v1.6.0,
// pkg/virt-api/webhooks/validating-webhook/admitters) for the lab: the checks virt-api runs on a
// VirtualMachine or VirtualMachineInstance, with the answers virt-api gives, and no cluster behind it.
//
// virt-api reads its ClusterConfig from the KubeVirt CR through informers; here the CR is a static one
// in a store (as KubeVirt's own tests build it, pkg/testutils), with the feature gates given as a flag.
// The VM admitter is given no KubeVirt client: its checks of the spec, the run strategy, the data volume
// templates and the snapshot/restore status use none. Instance types, preferences and hotplug volume
// requests on a running VM do; a request that would reach them is refused, naming the gap, rather than
// passed unchecked.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"runtime"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/defaults"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	validating "kubevirt.io/kubevirt/pkg/util/webhooks/validating-webhooks"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
)

const namespace = "kubevirt"

// clusterConfig is virt-api's view of a deployed KubeVirt CR with the given feature gates.
func clusterConfig(featureGates []string) (*virtconfig.ClusterConfig, error) {
	kv := &v1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: namespace, ResourceVersion: "1"},
		Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{
			DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: featureGates},
		}},
		Status: v1.KubeVirtStatus{Phase: v1.KubeVirtPhaseDeployed, DefaultArchitecture: runtime.GOARCH},
	}
	// Informers never started: their stores are the static answer (the lab's CDI serves DataVolumes).
	kvInformer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.KubeVirt{}, 0, cache.Indexers{})
	crdInformer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &extv1.CustomResourceDefinition{}, 0, cache.Indexers{})
	if err := kvInformer.GetStore().Add(kv); err != nil {
		return nil, err
	}
	dataVolumes := &extv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "datavolumes.cdi.kubevirt.io"},
		Spec:       extv1.CustomResourceDefinitionSpec{Names: extv1.CustomResourceDefinitionNames{Kind: "DataVolume"}},
	}
	if err := crdInformer.GetStore().Add(dataVolumes); err != nil {
		return nil, err
	}
	return virtconfig.NewClusterConfigWithCPUArch(crdInformer, kvInformer, namespace, runtime.GOARCH)
}

type admitFunc func(context.Context, *admissionv1.AdmissionReview) *admissionv1.AdmissionResponse

func (f admitFunc) Admit(ctx context.Context, ar *admissionv1.AdmissionReview) *admissionv1.AdmissionResponse {
	return f(ctx, ar)
}

func refuse(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: message, Code: http.StatusBadRequest}}
}

// guarded answers a panic inside an admitter (a path that wanted the absent client) with a refusal.
func guarded(next admitFunc) admitFunc {
	return func(ctx context.Context, ar *admissionv1.AdmissionReview) (resp *admissionv1.AdmissionResponse) {
		defer func() {
			if r := recover(); r != nil {
				log.Printf("admitter panicked: %v", r)
				resp = refuse(fmt.Sprintf("lab kubevirt-admission: the admitter needs what the lab does not serve: %v", r))
			}
		}()
		return next(ctx, ar)
	}
}

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "address to serve HTTPS on")
	cert := flag.String("tls-cert", "", "serving certificate (PEM)")
	key := flag.String("tls-key", "", "serving key (PEM)")
	gates := flag.String("feature-gates", "", "the KubeVirt CR's feature gates, comma separated")
	accounts := flag.String("kubevirt-service-accounts", "", "users virt-api trusts as KubeVirt's own, comma separated")
	flag.Parse()

	var featureGates []string
	if *gates != "" {
		featureGates = strings.Split(*gates, ",")
	}
	config, err := clusterConfig(featureGates)
	if err != nil {
		log.Fatalf("cluster config: %v", err)
	}
	trusted := map[string]struct{}{}
	for _, name := range strings.Split(*accounts, ",") {
		if name != "" {
			trusted[name] = struct{}{}
		}
	}

	vms := admitters.NewVMsAdmitter(config, nil, &webhooks.Informers{}, trusted)
	vmiCreate := &admitters.VMICreateAdmitter{
		ClusterConfig:           config,
		KubeVirtServiceAccounts: trusted,
		// virt-api adds the network validator to the create admitter (pkg/virt-api/api.go).
		SpecValidators: []admitters.SpecValidator{
			func(f *k8sfield.Path, spec *v1.VirtualMachineInstanceSpec, c *virtconfig.ClusterConfig) []metav1.StatusCause {
				return netadmitter.Validate(f, spec, c)
			},
		},
	}
	vmiUpdate := admitters.NewVMIUpdateAdmitter(config, trusted)

	http.HandleFunc("/validate-vm", func(w http.ResponseWriter, r *http.Request) {
		validating.Serve(w, r, guarded(func(ctx context.Context, ar *admissionv1.AdmissionReview) *admissionv1.AdmissionResponse {
			if gap := clientOnly(ar); gap != "" {
				return refuse("lab kubevirt-admission: " + gap + " needs a live KubeVirt client, which the lab's admission has not")
			}
			return vms.Admit(ctx, ar)
		}))
	})
	http.HandleFunc("/validate-vmi", func(w http.ResponseWriter, r *http.Request) {
		validating.Serve(w, r, guarded(func(ctx context.Context, ar *admissionv1.AdmissionReview) *admissionv1.AdmissionResponse {
			// virt-api registers the two on paths of their own; one path here, split by operation.
			if ar.Request.Operation == admissionv1.Update {
				return vmiUpdate.Admit(ctx, ar)
			}
			if err := withDefaults(ar, config); err != nil {
				return refuse(err.Error())
			}
			return vmiCreate.Admit(ctx, ar)
		}))
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

	server := &http.Server{Addr: *addr}
	log.Printf("kubevirt-admission (kubevirt.io/kubevirt v1.6.0) serving on %s", *addr)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}

// withDefaults gives a new VMI the defaults virt-api's mutating webhook sets before its validating one
// sees it (architecture, machine type, resources...); the lab runs no such mutator, and the VM
// admitter applies the same defaults to its copy itself. Nothing is stored: the lab's copy stays as
// written.
func withDefaults(ar *admissionv1.AdmissionReview, config *virtconfig.ClusterConfig) error {
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(ar.Request.Object.Raw, vmi); err != nil {
		return nil // the admitter reports it
	}
	if err := defaults.SetDefaultVirtualMachineInstance(config, vmi); err != nil {
		return err
	}
	raw, err := json.Marshal(vmi)
	if err != nil {
		return err
	}
	ar.Request.Object.Raw = raw
	return nil
}

// clientOnly names the part of a VM the admitter could only check through a KubeVirt client.
func clientOnly(ar *admissionv1.AdmissionReview) string {
	vm := v1.VirtualMachine{}
	if err := json.Unmarshal(ar.Request.Object.Raw, &vm); err != nil {
		return "" // the admitter reports it
	}
	switch {
	case vm.Spec.Instancetype != nil:
		return "spec.instancetype"
	case vm.Spec.Preference != nil:
		return "spec.preference"
	case len(vm.Status.VolumeRequests) > 0 && vm.Status.Ready:
		return "status.volumeRequests on a ready VM"
	}
	return ""
}
